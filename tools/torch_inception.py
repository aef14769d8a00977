"""The FID variant of Inception-V3 in PyTorch: the reference that dit_mp's C++ network
(src/eval/inception.cpp) is checked against (tools/inception_reference.py).

Parameter names follow torchvision's Inception3 (Conv2d_1a_3x3.conv.weight, Mixed_5b.branch1x1.bn.
running_var, ...), as in the FID weights that the community's evaluation code ports from the
TensorFlow graph, so such a state dict loads here. The FID variant differs from torchvision's
network in its pooling branches: the average pools of the A, C and first E blocks exclude the
zero padding from their mean (TensorFlow's behaviour), and the last E block (Mixed_7c) max-pools.
Inputs are (N, 1 or 3, H, W) in [-1, 1]; they are resized bilinearly to 299 x 299
(align_corners=False, no antialiasing) and the output is the 2048-d global average pool.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

BN_EPS = 1e-3  # the TensorFlow graph's BatchNorm epsilon
FEATURES = 2048
INPUT_SIZE = 299


class BasicConv2d(nn.Module):
    """conv (no bias) -> BatchNorm -> ReLU."""

    def __init__(self, cin, cout, kernel, stride=1, padding=0):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride=stride, padding=padding, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=BN_EPS)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


def avg_pool_no_pad(x):
    """3x3 stride 1 average over the in-image neighbours only (padding excluded from the count)."""
    return F.avg_pool2d(x, kernel_size=3, stride=1, padding=1, count_include_pad=False)


class BlockA(nn.Module):  # Mixed_5b/5c/5d, 35 x 35
    def __init__(self, cin, pool_features):
        super().__init__()
        self.branch1x1 = BasicConv2d(cin, 64, 1)
        self.branch5x5_1 = BasicConv2d(cin, 48, 1)
        self.branch5x5_2 = BasicConv2d(48, 64, 5, padding=2)
        self.branch3x3dbl_1 = BasicConv2d(cin, 64, 1)
        self.branch3x3dbl_2 = BasicConv2d(64, 96, 3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(96, 96, 3, padding=1)
        self.branch_pool = BasicConv2d(cin, pool_features, 1)

    def forward(self, x):
        a = self.branch1x1(x)
        b = self.branch5x5_2(self.branch5x5_1(x))
        c = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        d = self.branch_pool(avg_pool_no_pad(x))
        return torch.cat([a, b, c, d], 1)


class BlockB(nn.Module):  # Mixed_6a: 35 -> 17
    def __init__(self, cin):
        super().__init__()
        self.branch3x3 = BasicConv2d(cin, 384, 3, stride=2)
        self.branch3x3dbl_1 = BasicConv2d(cin, 64, 1)
        self.branch3x3dbl_2 = BasicConv2d(64, 96, 3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(96, 96, 3, stride=2)

    def forward(self, x):
        a = self.branch3x3(x)
        b = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        c = F.max_pool2d(x, kernel_size=3, stride=2)
        return torch.cat([a, b, c], 1)


class BlockC(nn.Module):  # Mixed_6b..6e, 17 x 17, factorized 7x7
    def __init__(self, cin, c7):
        super().__init__()
        self.branch1x1 = BasicConv2d(cin, 192, 1)
        self.branch7x7_1 = BasicConv2d(cin, c7, 1)
        self.branch7x7_2 = BasicConv2d(c7, c7, (1, 7), padding=(0, 3))
        self.branch7x7_3 = BasicConv2d(c7, 192, (7, 1), padding=(3, 0))
        self.branch7x7dbl_1 = BasicConv2d(cin, c7, 1)
        self.branch7x7dbl_2 = BasicConv2d(c7, c7, (7, 1), padding=(3, 0))
        self.branch7x7dbl_3 = BasicConv2d(c7, c7, (1, 7), padding=(0, 3))
        self.branch7x7dbl_4 = BasicConv2d(c7, c7, (7, 1), padding=(3, 0))
        self.branch7x7dbl_5 = BasicConv2d(c7, 192, (1, 7), padding=(0, 3))
        self.branch_pool = BasicConv2d(cin, 192, 1)

    def forward(self, x):
        a = self.branch1x1(x)
        b = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
        c = self.branch7x7dbl_1(x)
        for layer in (self.branch7x7dbl_2, self.branch7x7dbl_3, self.branch7x7dbl_4, self.branch7x7dbl_5):
            c = layer(c)
        d = self.branch_pool(avg_pool_no_pad(x))
        return torch.cat([a, b, c, d], 1)


class BlockD(nn.Module):  # Mixed_7a: 17 -> 8
    def __init__(self, cin):
        super().__init__()
        self.branch3x3_1 = BasicConv2d(cin, 192, 1)
        self.branch3x3_2 = BasicConv2d(192, 320, 3, stride=2)
        self.branch7x7x3_1 = BasicConv2d(cin, 192, 1)
        self.branch7x7x3_2 = BasicConv2d(192, 192, (1, 7), padding=(0, 3))
        self.branch7x7x3_3 = BasicConv2d(192, 192, (7, 1), padding=(3, 0))
        self.branch7x7x3_4 = BasicConv2d(192, 192, 3, stride=2)

    def forward(self, x):
        a = self.branch3x3_2(self.branch3x3_1(x))
        b = self.branch7x7x3_1(x)
        for layer in (self.branch7x7x3_2, self.branch7x7x3_3, self.branch7x7x3_4):
            b = layer(b)
        c = F.max_pool2d(x, kernel_size=3, stride=2)
        return torch.cat([a, b, c], 1)


class BlockE(nn.Module):  # Mixed_7b (average pool) and Mixed_7c (max pool), 8 x 8
    def __init__(self, cin, max_pool):
        super().__init__()
        self.max_pool = max_pool
        self.branch1x1 = BasicConv2d(cin, 320, 1)
        self.branch3x3_1 = BasicConv2d(cin, 384, 1)
        self.branch3x3_2a = BasicConv2d(384, 384, (1, 3), padding=(0, 1))
        self.branch3x3_2b = BasicConv2d(384, 384, (3, 1), padding=(1, 0))
        self.branch3x3dbl_1 = BasicConv2d(cin, 448, 1)
        self.branch3x3dbl_2 = BasicConv2d(448, 384, 3, padding=1)
        self.branch3x3dbl_3a = BasicConv2d(384, 384, (1, 3), padding=(0, 1))
        self.branch3x3dbl_3b = BasicConv2d(384, 384, (3, 1), padding=(1, 0))
        self.branch_pool = BasicConv2d(cin, 192, 1)

    def forward(self, x):
        a = self.branch1x1(x)
        b = self.branch3x3_1(x)
        b = torch.cat([self.branch3x3_2a(b), self.branch3x3_2b(b)], 1)
        c = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
        c = torch.cat([self.branch3x3dbl_3a(c), self.branch3x3dbl_3b(c)], 1)
        pooled = F.max_pool2d(x, kernel_size=3, stride=1, padding=1) if self.max_pool else avg_pool_no_pad(x)
        d = self.branch_pool(pooled)
        return torch.cat([a, b, c, d], 1)


class FIDInceptionV3(nn.Module):
    """Images (N, 1|3, H, W) in [-1, 1] -> pool features (N, 2048)."""

    def __init__(self, num_classes=1008):
        super().__init__()
        self.Conv2d_1a_3x3 = BasicConv2d(3, 32, 3, stride=2)
        self.Conv2d_2a_3x3 = BasicConv2d(32, 32, 3)
        self.Conv2d_2b_3x3 = BasicConv2d(32, 64, 3, padding=1)
        self.Conv2d_3b_1x1 = BasicConv2d(64, 80, 1)
        self.Conv2d_4a_3x3 = BasicConv2d(80, 192, 3)
        self.Mixed_5b = BlockA(192, 32)
        self.Mixed_5c = BlockA(256, 64)
        self.Mixed_5d = BlockA(288, 64)
        self.Mixed_6a = BlockB(288)
        self.Mixed_6b = BlockC(768, 128)
        self.Mixed_6c = BlockC(768, 160)
        self.Mixed_6d = BlockC(768, 160)
        self.Mixed_6e = BlockC(768, 192)
        self.Mixed_7a = BlockD(768)
        self.Mixed_7b = BlockE(1280, max_pool=False)
        self.Mixed_7c = BlockE(2048, max_pool=True)
        # The classifier is not part of the features; it is here so state dicts match the FID file.
        self.fc = nn.Linear(FEATURES, num_classes)

    def forward(self, x):
        if x.shape[1] == 1:
            x = x.repeat(1, 3, 1, 1)
        x = F.interpolate(x, size=(INPUT_SIZE, INPUT_SIZE), mode="bilinear", align_corners=False)
        x = self.Conv2d_2b_3x3(self.Conv2d_2a_3x3(self.Conv2d_1a_3x3(x)))  # (N, 64, 147, 147)
        x = F.max_pool2d(x, kernel_size=3, stride=2)                        # (N, 64, 73, 73)
        x = self.Conv2d_4a_3x3(self.Conv2d_3b_1x1(x))                       # (N, 192, 71, 71)
        x = F.max_pool2d(x, kernel_size=3, stride=2)                        # (N, 192, 35, 35)
        for name in ("5b", "5c", "5d", "6a", "6b", "6c", "6d", "6e", "7a", "7b", "7c"):
            x = getattr(self, "Mixed_" + name)(x)                           # ... (N, 2048, 8, 8)
        return x.mean(dim=(2, 3))                                           # (N, 2048)

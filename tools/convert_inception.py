#!/usr/bin/env python3
"""The FID Inception-V3 weights -> the HDF5 file `dit_mp evaluate --features inception` reads.

  convert_inception.py STATE_DICT.pth OUT.h5

STATE_DICT.pth is a PyTorch state dict of the FID variant of Inception-V3 with torchvision's
Inception3 names, e.g. the file the community's PyTorch FID code downloads
(pt_inception-2015-12-05-6726825d.pth, ported from TensorFlow's inception-2015-12-05 graph).
It is loaded with torch.load(weights_only=True): only tensors are unpickled. Every convolution
and BatchNorm tensor must be there with the FID network's shape (tools/torch_inception.py is the
shape reference); the classifier (fc.*), auxiliary head (AuxLogits.*) and BatchNorm step counters
are left out, since the 2048-d pool features do not use them.

OUT.h5 (the layout src/eval/inception.cpp reads; plain HDF5, so h5py opens it):
  /                           attribute format = "dit_mp inception-v3 fid", version = 1
  /weights/<layer>.conv.weight        (out, in, kh, kw) float32
  /weights/<layer>.bn.weight|bias|running_mean|running_var   (out,) float32
e.g. /weights/Mixed_7c.branch3x3dbl_3b.conv.weight. Datasets carry Fletcher32 checksums and the
file is sealed like dit_mp's weights files (size and CRC-32 in a 512-byte user block; see
tools/dit_checkpoint.py seal), so dit_mp verifies it whole before reading. BatchNorm
(eps 1e-3) is folded into the convolutions by dit_mp at load. Written under OUT.h5.tmp and renamed.

Needs PyTorch, h5py and numpy (Debian: python3-torch python3-h5py python3-numpy).
"""
import argparse
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dit_checkpoint import SEAL_BYTES, load_tensors, seal  # noqa: E402
import torch_inception  # noqa: E402

FORMAT = "dit_mp inception-v3 fid"
VERSION = 1


def expected_shapes():
    """name -> shape of every tensor the features need (fc and BatchNorm counters excluded)."""
    model = torch_inception.FIDInceptionV3()
    return {k: tuple(v.shape) for k, v in model.state_dict().items()
            if not k.startswith("fc.") and not k.endswith("num_batches_tracked")}


def select(state, source):
    """The state dict's feature tensors as float32 numpy arrays; exits with one line naming the
    first missing or misshapen tensor."""
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict):
        sys.exit(f"convert_inception: {source}: expected a state dict (name -> tensor)")
    out = {}
    for name, shape in expected_shapes().items():
        if name not in state:
            sys.exit(f"convert_inception: {source}: tensor '{name}' is missing; expected the FID "
                     f"Inception-V3 state dict with torchvision's Inception3 names")
        got = tuple(state[name].shape)
        if got != shape:
            sys.exit(f"convert_inception: {source}: tensor '{name}' has shape {list(got)}, "
                     f"expected {list(shape)}")
        values = state[name].detach().float().numpy()
        if not np.isfinite(values).all():
            sys.exit(f"convert_inception: {source}: tensor '{name}' holds NaN or Inf")
        out[name] = values
    return out


def convert(source, target):
    tensors = select(load_tensors(source), source)
    tmp = target + ".tmp"
    try:
        with h5py.File(tmp, "w", userblock_size=SEAL_BYTES) as f:
            f.attrs["format"] = FORMAT
            f.attrs["version"] = np.int64(VERSION)
            w = f.create_group("weights")
            for name, values in tensors.items():
                w.create_dataset(name, data=values, fletcher32=True)
        seal(tmp)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return len(tensors)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("source", help="PyTorch state dict of the FID Inception-V3 (.pth)")
    p.add_argument("out", help="HDF5 file to write")
    a = p.parse_args()
    if not os.path.isfile(a.source):
        sys.exit(f"convert_inception: {a.source}: no such file; expected the FID Inception-V3 state dict (.pth)")
    n = convert(a.source, a.out)
    print(f"wrote {a.out}: {n} tensors")


if __name__ == "__main__":
    main()

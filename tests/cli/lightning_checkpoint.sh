#!/usr/bin/env bash
# SiT and LightningDiT weights in and out: state dicts built with the reference repositories' own
# model code (willisma/SiT models.py, hustvl/LightningDiT models/lightningdit.py, with learned
# sigma) are imported by tools/dit_checkpoint.py (the learned-sigma rows dropped, said once; the
# block variants read off the keys), sampled from by dit_mp, exported back, and loaded strictly
# by the reference models without learned sigma, whose outputs equal the originals' (which
# discard the sigma half). The reference checkouts: DIT_SIT_REF and DIT_LIGHTNINGDIT_REF
# (default /work/ref/...); skipped where they are absent.
source "$(dirname "$0")/common.sh"
python_tools_or_skip
SIT=${DIT_SIT_REF:-/work/ref/willisma+SiT}
LDIT=${DIT_LIGHTNINGDIT_REF:-/work/ref/hustvl+LightningDiT}
[[ -f $SIT/models.py && -f $LDIT/models/lightningdit.py ]] || { echo "SKIP: no SiT / LightningDiT checkout"; exit 0; }
cd "$SCRATCH"
cat > shims.py <<'PY'
# What the reference model code imports and Debian's PyTorch 1.13 lacks: torch.compile,
# F.scaled_dot_product_attention, timm's
# PatchEmbed / Attention / Mlp, einops' rearrange / repeat as the references use them, and the
# fairscale names rmsnorm.py imports (unused by RMSNorm).
import sys, types, torch, torch.nn as nn, torch.nn.functional as F
torch.compile = getattr(torch, "compile", None) or (lambda f=None, **k: f if f is not None else (lambda g: g))
if not hasattr(F, "scaled_dot_product_attention"):
    F.scaled_dot_product_attention = lambda q, k, v, dropout_p=0.0: (
        (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).softmax(-1) @ v)
class PatchEmbed(nn.Module):
    def __init__(self, img_size, patch_size, in_chans, embed_dim, bias=True):
        super().__init__()
        self.patch_size = (patch_size, patch_size)
        self.num_patches = (img_size // patch_size) ** 2
        self.proj = nn.Conv2d(in_chans, embed_dim, patch_size, patch_size, bias=bias)
    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)
class Attention(nn.Module):
    def __init__(self, dim, num_heads=8, qkv_bias=False, **_):
        super().__init__()
        self.num_heads = num_heads
        self.qkv, self.proj = nn.Linear(dim, 3 * dim, bias=qkv_bias), nn.Linear(dim, dim)
    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.num_heads, c // self.num_heads).permute(2, 0, 3, 1, 4)
        a = (q @ k.transpose(-2, -1) / (c // self.num_heads) ** 0.5).softmax(-1)
        return self.proj((a @ v).transpose(1, 2).reshape(b, n, c))
class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features, act_layer=nn.GELU, drop=0):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(in_features, hidden_features), act_layer(), nn.Linear(hidden_features, in_features)
    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))
def rearrange(x, pattern, r=None):
    if pattern == "... (d r) -> ... d r":
        return x.reshape(*x.shape[:-1], x.shape[-1] // r, r)
    assert pattern == "... d r -> ... (d r)", pattern
    return x.reshape(*x.shape[:-2], -1)
def repeat(x, pattern, r):
    assert pattern == "... n -> ... (n r)", pattern
    return x.repeat_interleave(r, dim=-1)
def module(name, **attrs):
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    sys.modules[name] = m
    return m
module("timm"); module("timm.models"); module("timm.models.vision_transformer", PatchEmbed=PatchEmbed, Attention=Attention, Mlp=Mlp)
module("einops", rearrange=rearrange, repeat=repeat)
module("fairscale"); module("fairscale.nn"); module("fairscale.nn.model_parallel")
module("fairscale.nn.model_parallel.initialize")
module("fairscale.nn.model_parallel.layers", ColumnParallelLinear=None, RowParallelLinear=None, ParallelEmbedding=None)
def load(repo, name):
    sys.path.insert(0, repo)
    try:
        return __import__(name, fromlist=["*"])
    finally:
        sys.path.pop(0)
def perturbed(m):
    torch.manual_seed(0)
    with torch.no_grad():
        for p in m.parameters():
            if p.requires_grad:  # pos_embed stays the fixed sin-cos table
                p.add_(0.05 * torch.randn_like(p))
    return m.eval()
PY
# 1. Reference models with learned sigma, off their zero init, saved as .pt; their outputs kept.
$PY - "$SIT" "$LDIT" <<'PY' || fail "building the reference models failed"
import sys, torch
from shims import load, perturbed
sit, ldit = load(sys.argv[1], "models"), None
del sys.modules["models"]
ldit = load(sys.argv[2], "models.lightningdit")
kw = dict(input_size=8, patch_size=2, in_channels=4, hidden_size=32, depth=2, num_heads=4, num_classes=10)
s = perturbed(sit.SiT(learn_sigma=True, **kw))
l = perturbed(ldit.LightningDiT(learn_sigma=True, use_qknorm=True, use_swiglu=True, use_rope=True,
                                use_rmsnorm=True, **kw))
torch.manual_seed(1)
x, t, y = torch.randn(2, 4, 8, 8), torch.tensor([0.2, 0.9]), torch.tensor([3, 7])
torch.save(s.state_dict(), "sit.pt"); torch.save(l.state_dict(), "lightning.pt")
with torch.no_grad():
    torch.save({"x": x, "t": t, "y": y, "sit": s(x, t, y), "lightning": l(x, t, y)}, "io.pt")
PY
# 2. Import: the sigma rows dropped, said once; the variants read off the keys.
$PY "$TOOLS/dit_checkpoint.py" import sit.pt sit.h5 --num-heads 4 --family sit > sit.txt || fail "SiT import failed"
$PY "$TOOLS/dit_checkpoint.py" import lightning.pt light.h5 --num-heads 4 > light.txt || fail "LightningDiT import failed"
for f in sit light; do
  [[ $(grep -c "discards the learned-sigma half" $f.txt) == 1 ]] || { cat $f.txt; fail "$f: the sigma rows were not reported once"; }
done
grep -q "dropped 16 of 32 rows of final_layer.linear" light.txt || { cat light.txt; fail "wrong rows dropped"; }
$PY - <<'PY' || fail "the imported files' configs are wrong"
import h5py
with h5py.File("light.h5", "r") as f:
    c = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f["config"].attrs.items()}
    assert (c["mlp"], c["norm"], c["pos_embed"], int(c["qk_norm"]), int(c["learn_sigma"])) == ("swiglu", "rmsnorm", "rope", 1, 0), c
    assert f["weights/blocks.1.mlp.w12.weight"].shape == (2 * 85, 32) and "feat_rope.freqs_cos" not in f["weights"]
    assert f["weights/final_layer.linear.weight"].shape == (16, 32)
with h5py.File("sit.h5", "r") as f:
    assert int(f["config"].attrs["learn_sigma"]) == 0 and "mlp" not in f["config"].attrs
PY
# 3. dit_mp builds both models from the files and samples from them.
for f in sit light; do
  "$DIT_MP" sample --weights $f.h5 --classes 0,1 --per-class 1 --steps 2 --out ${f}_samples.png > $f.sample.txt 2>&1 ||
    { cat $f.sample.txt; fail "dit_mp sample --weights $f.h5 failed"; }
done
# 4. Export back: the reference models without learned sigma load them strictly and reproduce the
# originals' outputs (the sigma half they discarded).
$PY "$TOOLS/dit_checkpoint.py" export sit.h5 sit_back.pt > /dev/null || fail "SiT export failed"
$PY "$TOOLS/dit_checkpoint.py" export light.h5 light_back.pt > /dev/null || fail "LightningDiT export failed"
$PY - "$SIT" "$LDIT" <<'PY' || fail "the exported state dicts do not reproduce the reference models"
import sys, torch
from shims import load
sit = load(sys.argv[1], "models")
del sys.modules["models"]
ldit = load(sys.argv[2], "models.lightningdit")
kw = dict(input_size=8, patch_size=2, in_channels=4, hidden_size=32, depth=2, num_heads=4, num_classes=10)
io = torch.load("io.pt")
for name, m, pt in [("sit", sit.SiT(learn_sigma=False, **kw), "sit_back.pt"),
                    ("lightning", ldit.LightningDiT(learn_sigma=False, use_qknorm=True, use_swiglu=True,
                                                    use_rope=True, use_rmsnorm=True, **kw), "light_back.pt")]:
    m.load_state_dict(torch.load(pt), strict=True)
    with torch.no_grad():
        out = m.eval()(io["x"], io["t"], io["y"])
    err = ((out - io[name]).norm() / io[name].norm()).item()
    print(f"{name}: exported weights reproduce the reference output to {err:.2e}")
    assert err <= 1e-6, err
PY
echo "ok: SiT and LightningDiT state dicts import (sigma rows dropped once), sample in dit_mp, and export back"

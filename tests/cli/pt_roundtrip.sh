#!/usr/bin/env bash
# Official weights in and out: a state dict saved from a PyTorch model of the official DiT
# architecture is imported, run by dit_mp against float64 references of that same model
# (golden-style relative error <= 1e-5), and exported back to a state dict that the official
# architecture loads strictly, tensor for tensor; a sharded checkpoint exports the same way.
source "$(dirname "$0")/common.sh"
python_tools_or_skip
cd "$SCRATCH"
# 1. A model of the official architecture with weights off the zero init, saved as official .pt.
$PY - "$TOOLS" <<'PY'
import sys, torch
sys.path.insert(0, sys.argv[1])
import torch_dit
torch.manual_seed(0)
m = torch_dit.DiT(input_size=8, patch_size=2, in_channels=4, hidden_size=64, depth=2, num_heads=4,
                  num_classes=10, learn_sigma=True)
with torch.no_grad():
    for p in m.parameters():
        if p.requires_grad:
            p.add_(0.05 * torch.randn_like(p))
torch.save(m.state_dict(), "official.pt")
PY
$PY "$TOOLS/dit_checkpoint.py" import official.pt imported.h5 --num-heads 4 > import.txt || fail "import failed"
# 2. float64 references of the official model with those weights; dit_mp runs the IMPORTED tensors.
$PY "$TOOLS/make_golden.py" --input-size 8 --patch-size 2 --in-channels 4 --hidden-size 64 --depth 2 \
  --num-heads 4 --num-classes 10 --batch 2 --weights-from official.pt --out ref.h5 > /dev/null || fail "make_golden failed"
$PY - <<'PY'
import h5py
with h5py.File("ref.h5", "a") as ref, h5py.File("imported.h5", "r") as imp:
    for name in imp["weights"]:
        del ref["weights/" + name]
        ref["weights/" + name] = imp["weights/" + name][...].astype("float64")
PY
"$DIT_MP" verify --golden ref.h5 --groups forward > verify.txt || { cat verify.txt; fail "verify of the imported weights failed"; }
worst=$(sed -n 's/.*worst relative error \([0-9.e+-]*\).*/\1/p' verify.txt)
$PY -c "import sys; w = float('$worst'); print(f'imported weights: worst relative error {w:.2e}'); sys.exit(0 if w <= 1e-5 else 1)" ||
  fail "imported weights reproduce the official outputs only to $worst"
# 3. Export the imported weights back: the official architecture loads them, equal to the original.
$PY "$TOOLS/dit_checkpoint.py" export imported.h5 back.pt > /dev/null || fail "export failed"
$PY - <<'PY'
import torch
a, b = torch.load("official.pt"), torch.load("back.pt")
assert a.keys() == b.keys(), set(a) ^ set(b)
for k in a:
    assert torch.equal(a[k], b[k]), k
print(f"export: {len(a)} tensors equal to the official state dict")
PY
# 3b. A model trained at diffusion.steps = 500 (issue 34): export says the .pt cannot hold it, and an
# import with --diffusion-steps 500 records it again, where sampling reads it.
$PY - <<'PY'
import h5py, numpy as np
with h5py.File("imported.h5", "r+") as f:
    f["config"].attrs["diffusion_steps"] = np.int64(500)
PY
$PY "$TOOLS/dit_checkpoint.py" seal imported.h5 > /dev/null || fail "reseal failed"
$PY "$TOOLS/dit_checkpoint.py" export imported.h5 back500.pt > /dev/null 2> export500.txt || fail "export of the 500-step model"
grep -q "was trained with diffusion_steps = 500, which a .pt cannot hold: import it back with --diffusion-steps 500" \
  export500.txt || fail "export does not say diffusion_steps is lost: $(cat export500.txt)"
$PY "$TOOLS/dit_checkpoint.py" import back500.pt again500.h5 --num-heads 4 --input-size 8 --diffusion-steps 500 \
  > /dev/null || fail "import with --diffusion-steps"
[[ $(attr again500.h5 diffusion_steps) == 500 ]] || fail "the re-imported model lost diffusion_steps = 500"
# 4. A sharded checkpoint (written at tp 2 pp 2) exports through its index's virtual datasets.
prepare_fashion_test
$MPIRUN -n 4 "$DIT_MP" --tp 2 --pp 2 --steps 1 --data "$SCRATCH/fm_test.h5" --run-dir run "${TINY[@]}" > train.txt 2>&1 ||
  { cat train.txt; fail "training failed"; }
$PY "$TOOLS/dit_checkpoint.py" export run/ckpt ckpt.pt --kind ema > /dev/null || fail "checkpoint export failed"
$PY - <<'PY'
import h5py, numpy as np, torch
sd = torch.load("ckpt.pt")
with h5py.File("run/ema.h5", "r") as f:
    for name in f["weights"]:
        assert np.array_equal(sd[name].numpy(), f["weights/" + name][...]), name
print(f"checkpoint export: EMA tensors equal to the run's ema.h5")
PY
echo ok

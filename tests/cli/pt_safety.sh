#!/usr/bin/env bash
# Importing a .pt loads tensors only: a crafted pickle that would create a file when unpickled is
# refused by tools/dit_checkpoint.py import and tools/make_golden.py with one line on stderr, and
# the file is never created; a plain state dict still imports.
source "$(dirname "$0")/common.sh"
python_tools_or_skip
cd "$SCRATCH"
$PY - "$SCRATCH/pwned" <<'PY'
import sys, torch
class Payload:  # unpickling calls open(path, "w"): arbitrary code in a real attack
    def __reduce__(self):
        return (open, (sys.argv[1], "w"))
torch.save({"x_embedder.proj.weight": torch.zeros(2), "extra": Payload()}, "evil.pt")
PY
[[ ! -e pwned ]] || fail "saving the crafted pickle already created the file"
check_refused() {  # check_refused NAME COMMAND...: fails with one line naming the file; no payload run
  local name=$1 rc=0
  shift
  "$@" > out.txt 2> err.txt || rc=$?
  [[ ! -e pwned ]] || fail "$name ran the pickle's code"
  [[ $rc -ne 0 ]] || fail "$name accepted the crafted pickle"
  grep -q "evil.pt" err.txt || fail "$name: the message does not name evil.pt: $(cat err.txt)"
  [[ $(wc -l < err.txt) -eq 1 ]] || fail "$name: expected one line on stderr: $(cat err.txt)"
  echo "ok: $name refuses the crafted pickle: $(cat err.txt)"
}
check_refused "dit_checkpoint.py import" $PY "$TOOLS/dit_checkpoint.py" import evil.pt out.h5 --num-heads 4
check_refused "make_golden.py --weights-from" $PY "$TOOLS/make_golden.py" --input-size 8 --patch-size 2 \
  --in-channels 4 --hidden-size 64 --depth 2 --num-heads 4 --num-classes 10 --batch 2 --weights-from evil.pt --out ref.h5
# A plain state dict still imports.
$PY - "$TOOLS" <<'PY'
import sys, torch
sys.path.insert(0, sys.argv[1])
import torch_dit
m = torch_dit.DiT(input_size=8, patch_size=2, in_channels=4, hidden_size=64, depth=2, num_heads=4, num_classes=10)
torch.save(m.state_dict(), "good.pt")
PY
$PY "$TOOLS/dit_checkpoint.py" import good.pt good.h5 --num-heads 4 > /dev/null || fail "a plain state dict no longer imports"
echo "ok"

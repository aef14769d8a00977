#!/usr/bin/env bash
# tools/convert_inception.py on bad input: a state dict missing a tensor, one with a misshapen
# tensor, a pickle holding more than tensors, and a missing file each end with one line on stderr
# naming the file (and the tensor), a non-zero exit, and no output file (nor its .tmp) left; a
# complete state dict (here wrapped in {"state_dict": ...}) converts into a sealed file. The unit
# test InceptionReference.* loads converted files and checks the numbers.
source "$(dirname "$0")/common.sh"
python_tools_or_skip
cd "$SCRATCH"
$PY - "$TOOLS" <<'PY'
import collections, sys, torch
sys.path.insert(0, sys.argv[1])
import torch_inception
sd = torch_inception.FIDInceptionV3().state_dict()
d = dict(sd); del d["Mixed_6c.branch7x7_2.bn.running_var"]; torch.save(d, "missing.pth")
d = dict(sd); d["Mixed_7c.branch_pool.conv.weight"] = torch.zeros(192, 2048, 3, 1); torch.save(d, "shape.pth")
torch.save(collections.Counter(a=1), "pickle.pth")
torch.save({"state_dict": sd}, "good.pth")
PY
check_refused() {  # check_refused FILE TEXT: the converter fails on FILE with one line holding TEXT
  local rc=0
  $PY "$TOOLS/convert_inception.py" "$1" out.h5 > out.txt 2> err.txt || rc=$?
  [[ $rc -ne 0 ]] || fail "convert_inception accepted $1"
  [[ $(wc -l < err.txt) -eq 1 ]] || fail "$1: expected one line on stderr: $(cat err.txt)"
  grep -qF "$1" err.txt || fail "$1: the message does not name the file: $(cat err.txt)"
  grep -qF "$2" err.txt || fail "$1: the message lacks '$2': $(cat err.txt)"
  [[ ! -e out.h5 && ! -e out.h5.tmp ]] || fail "$1: an output file was left behind"
  echo "ok: $(cat err.txt)"
}
check_refused missing.pth "tensor 'Mixed_6c.branch7x7_2.bn.running_var' is missing"
check_refused shape.pth "tensor 'Mixed_7c.branch_pool.conv.weight' has shape [192, 2048, 3, 1], expected [192, 2048, 1, 1]"
check_refused pickle.pth "refused: it holds more than tensors"
check_refused nope.pth "no such file"
grep -q "wrote good.h5: 470 tensors" <<<"$($PY "$TOOLS/convert_inception.py" good.pth good.h5)" || fail "good.pth did not convert"
[[ $(head -c 20 good.h5) == "dit_mp sealed hdf5 1"* ]] || fail "good.h5 is not sealed"
echo "ok: a complete state dict converts into a sealed file"

#!/usr/bin/env bash
# Predicted step time (a model, not a measurement) of DiT-XL/2 on H100 nodes at pp 4 and 8 with each
# pipeline schedule: dit_mp plan --predict, global batch 256, micro-batch 8 (8 microbatches per dp
# rank at dp 4). ZB-V needs depth 28 to split into 2 x pp chunks: refused at pp 4 and 8 (one message).
#   benchmarks/scaling/predict_zb.sh [path/to/dit_mp]
set -euo pipefail
DIT_MP=${1:-$(dirname "$0")/../../build-cpu/bin/dit_mp}
echo "| layout (tp x pp x dp) | schedule | step ms | images/s | bubble |"
echo "| --- | --- | --- | --- | --- |"
for layout in "2 4 4" "1 8 4"; do
  set -- $layout
  for s in "1f1b 1" "1f1b 2" "zb-h1 1" "zb-v 2"; do
    read -r sched v <<< "$s"
    name=$sched; [ "$sched" = 1f1b ] && [ "$v" = 2 ] && name="interleaved v 2"
    out=$("$DIT_MP" plan --model DiT-XL/2 --tp "$1" --pp "$2" --dp "$3" --predict --hardware h100 \
      --set train.global_batch=256 --set train.micro_batch=8 --set parallel.schedule=\"$sched\" \
      --set parallel.virtual_stages="$v" 2>&1) || { echo "| $1x$2x$3 | $name | refused: ${out##*error: } | | |"; continue; }
    echo "$out" | python3 -c "
import json, sys
line = [l for l in sys.stdin if l.startswith('predicted')][-1]
r = json.loads(line.split(': ', 1)[1])
print(f\"| $1x$2x$3 | $name | {1e3 * r['step_s']:.1f} | {r['images_per_s']:.0f} | {100 * r['bubble']:.1f}% |\")"
  done
done

#!/usr/bin/env bash
# Fuzzes the readers (TOML config, plan calibration, dataset, weights, checkpoint index, FID statistics
# .npz, samples, safetensors) with libFuzzer and AddressSanitizer: builds build-fuzz/ with clang (-DDIT_FUZZ=ON),
# runs each target for SECONDS (default 60) from its corpus in tests/data/fuzz/<target>/, then merges
# the inputs that reach new code back into that corpus (the text corpora, config and calibration, by
# default: the binary corpora stay small seeds; DIT_FUZZ_MERGE_ALL=1 merges them all). A crash,
# leak-free timeout or ASan report stops with the input saved as tests/data/fuzz/<target>/crash-...
# (or timeout-...): fix the reader, keep the input as a regression test (CI runs every corpus file),
# and run again.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]      (CI runs the same targets: ctest -R fuzz)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(config calibration dataset weights index npz samples safetensors)
command -v clang++ > /dev/null || { echo "fuzz.sh: clang++ not found (scripts/install_deps.sh installs it)"; exit 1; }
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DDIT_FUZZ=ON -DDIT_CUDA=OFF -DDIT_BUILD_BENCHMARKS=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo > build-fuzz.cmake.log 2>&1 || { cat build-fuzz.cmake.log; exit 1; }
cmake --build build-fuzz -j "${DIT_JOBS:-$(nproc)}" --target "${targets[@]/#/fuzz_}"
# HDF5 and toml11 keep allocations past exit that are theirs, not leaks of ours.
export ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1
for t in "${targets[@]}"; do
  corpus=tests/data/fuzz/$t
  work=build-fuzz/corpus/$t
  mkdir -p "$work"
  echo "== fuzz_$t for ${secs} s"
  build-fuzz/tests/fuzz/fuzz_$t -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$corpus/" "$work" "$corpus" 2>&1 | grep -E "^#[0-9]+.*(DONE|pulse)|stat::number_of_executed_units|ERROR|SUMMARY" || true
  if [[ $t == config || $t == calibration || ${DIT_FUZZ_MERGE_ALL:-0} == 1 ]]; then
    build-fuzz/tests/fuzz/fuzz_$t -merge=1 "$corpus" "$work" 2>&1 | grep -E "MERGE-OUTER: [0-9]+ new files" || true
  fi
done
echo "fuzz.sh: done; new crash-*/timeout-* files under tests/data/fuzz/ are findings"

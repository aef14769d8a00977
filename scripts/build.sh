#!/usr/bin/env bash
# Configures and builds dit_mp into a build folder (default: build/), installing the system
# packages first. It builds what a user runs: the `apps` target (dit_mp and the benchmark programs);
# the tests are configured too, and `cmake --build build` (or DIT_BUILD_TARGET=all, as
# scripts/test.sh does) builds them. Extra arguments go to CMake, e.g.
# scripts/build.sh build-cpu -DDIT_CUDA=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
shift || true
scripts/install_deps.sh
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release "$@" >"$build_dir.cmake.log" 2>&1 ||
  { cat "$build_dir.cmake.log"; exit 1; }
grep -E "dit_mp: CUDA backend" "$build_dir.cmake.log" || true
cmake --build "$build_dir" -j "${DIT_JOBS:-$(nproc)}" --target "${DIT_BUILD_TARGET:-apps}"

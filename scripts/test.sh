#!/usr/bin/env bash
# Sets up a fresh machine and runs the whole test suite: installs packages, builds dit_mp and every
# test (with the CUDA backend when nvcc is present; its GPU tests skip without a GPU), runs every
# ctest test, then builds a CPU-only configuration (-DDIT_CUDA=OFF) as well and runs the tests whose
# result depends on the configuration (label build). Both configurations compile through ccache
# (installed by scripts/install_deps.sh), so the second takes every translation unit the two share
# from the first. Prints the time of each part and the total.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# Running as root under mpirun with more ranks than cores (tests use up to 8 ranks).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# Every test runs on this one machine: OpenMPI's ob1 point-to-point over shared memory (and TCP),
# not UCX, whose start-up probes network devices there are none of; a process started without
# mpirun stays a singleton of its own instead of forking a runtime daemon. MPI_Init takes about
# 0.15 s instead of 0.65 s on this machine, for every dit_mp the tests start.
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1} OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader,tcp}
export OMPI_MCA_ess_singleton_isolated=${OMPI_MCA_ess_singleton_isolated:-1}

start=$(date +%s)
parts=()
mark=$start
lap() {  # lap NAME: the seconds since the previous lap, kept for the summary
  local now
  now=$(date +%s)
  parts+=("$1 $((now - mark)) s")
  mark=$now
}
DIT_BUILD_TARGET=all scripts/build.sh build
lap "packages and build"
(cd build && ctest --output-on-failure -j "${DIT_JOBS:-2}")
lap "tests"
if [[ "${DIT_SKIP_CPU_ONLY:-0}" != 1 ]] && grep -q "CUDA backend ON" build.cmake.log; then
  echo "== CPU-only configuration (-DDIT_CUDA=OFF)"
  # Everything builds (a CPU-only compile error shows here); the tests that depend on the build's
  # configuration run: label build (NCCL placement, a backend the build lacks) and the unit tests
  # (the backend registry, the GPU tests' skips). The rest checks code the two configurations
  # share and already ran above.
  DIT_BUILD_TARGET=all scripts/build.sh build-cpu -DDIT_CUDA=OFF
  lap "CPU-only build"
  (cd build-cpu && ctest --output-on-failure -j "${DIT_JOBS:-2}" -L build)
  (cd build-cpu/tests && OMP_NUM_THREADS=2 ./dit_tests --gtest_brief=1 --gtest_filter=-InceptionReference.*)
  lap "CPU-only tests"
fi
echo "test.sh: $(IFS=,; echo "${parts[*]}" | sed 's/,/, /g')"
echo "test.sh: all tests passed in $(( $(date +%s) - start )) s"

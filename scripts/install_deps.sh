#!/usr/bin/env bash
# Installs every system package dit_mp needs from Debian's apt repository. Idempotent: packages
# already present are skipped, so a second run is quick and changes nothing.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config
  ccache  # CMake compiles through it when found: test.sh's CPU-only pass reuses the first build's objects
  xz-utils  # scripts/pack_gpu.sh compresses the GPU pack (and cli.gpu_check unpacks it)
  libopenmpi-dev openmpi-bin
  libhdf5-dev hdf5-tools
  libeigen3-dev libtoml11-dev libcli11-dev
  libbenchmark-dev libgtest-dev
  libstb-dev libpng-dev libopenblas-dev
  dataset-fashion-mnist
  slurm-wlm  # the SLURM test (tests/slurm) runs a real single-machine cluster; brings munge
  python3 python3-matplotlib   # benchmarks/scaling/study.py: the scaling-study driver and its plots
)
# Python side: tools/dit_checkpoint.py (official .pt weights in and out), the PyTorch reference
# DiT and its tests, tools/plot_run.py (matplotlib), and the Inception-V3 FID reference check
# (tools/inception_reference.py: scipy's sqrtm, as the community's FID code computes it).
# DIT_WITH_PYTHON=0 skips them (those tests then print why they skip).
if [[ "${DIT_WITH_PYTHON:-1}" == 1 ]]; then
  PACKAGES+=(python3-torch python3-h5py python3-numpy python3-matplotlib python3-scipy)
  PACKAGES+=(python3-protobuf)  # tests/cli/tb_events.py reads TensorBoard's event files with it
fi
# tests/cli/report.sh opens dit_mp report's page in a real browser, Debian's chromium, headless.
# DIT_WITH_BROWSER=0 skips it (the test then prints why it skips).
if [[ "${DIT_WITH_BROWSER:-1}" == 1 ]]; then
  PACKAGES+=(chromium)
fi
# scripts/fuzz.sh: clang with libFuzzer and its OpenMP runtime. DIT_WITH_FUZZ=0 skips them (CI's
# fuzz tests then use the deterministic driver, which needs nothing more).
if [[ "${DIT_WITH_FUZZ:-1}" == 1 ]]; then
  PACKAGES+=(clang libomp-dev)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == *"install ok installed"* ]] || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install_deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi
echo "install_deps: installing ${missing[*]}"
SUDO=""
[[ $(id -u) -eq 0 ]] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install_deps: done"

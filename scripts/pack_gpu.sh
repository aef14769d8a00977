#!/usr/bin/env bash
# Builds the CUDA Release binaries here (build-gpu/) and packs what a GPU host without a package
# manager needs to run them into .gpu/ (git-ignored; the device tool carries it):
#   bin/   dit_mp, dit_tests, dit_mpi_tests, bench_train, bench_attention, bench_vae
#   lib/   their shared-library closure, minus glibc, libstdc++, libgcc_s and the CUDA, cuBLAS,
#          cuDNN and NCCL libraries (the GPU host brings those: toolkit and pip packages), and
#          minus HDF5's network and crypto dependencies (its ros3 driver, which dit_mp never
#          opens): libcurl and libcrypto are replaced by stubs whose functions report failure,
#          which leaves out 27 libraries (15 MiB) of curl, OpenSSL, GnuTLS, Kerberos and LDAP
#   mpi/   a relocatable OpenMPI 4.1 runtime (mpirun, orted, plugins, help files) and PMIx plugins
#   data/  a small latents dataset (.h5) for the training runs
#   diffusers/src/diffusers/  with DIT_DIFFUSERS_SRC (or --diffusers-src) naming a diffusers tree:
#          only the Python files benchmarks/vae_torch.py imports (the VAE's PyTorch baseline in
#          run.sh's stage 9; listed by importing it here), plus diffusers/, models/ and utils/'s
#          top-level modules; without a tree, skipped with the reason (stage 9 then times ours alone)
#   env.sh sets OPAL_*/PMIX_* so the moved OpenMPI finds its plugins and help files there
# Then checks the pack on this machine: 2 ranks under the pack's mpirun and a singleton, with
# LD_LIBRARY_PATH set to the pack only, and LD_DEBUG showing where MPI, PMIx, HDF5 and the MPI
# plugins were loaded from.
# Last, bin/ lib/ mpi/ pmix/ (and diffusers/) go into one pack.tar.xz (about a third of their size), which
# benchmarks/gpu/run.sh unpacks on the GPU host.
#   scripts/pack_gpu.sh [--jobs N] [--from BUILD_DIR] [--pack DIR] [--no-compress] [--diffusers-src DIR]
# --from: pack an existing build tree instead of building build-gpu/ (a CPU build packs too: the
# conformance and GPU steps then skip); --pack: where to pack (default .gpu/); --no-compress:
# leave the folders as they are (usable in place: source env.sh).
# Last it prints the carry size (.gpu/ plus the working tree the device tool copies; under 48 MiB)
# and the device command: bash benchmarks/gpu/run.sh --build .gpu --out $OUT (carry .gpu; docs/gpu.md).
set -eEuo pipefail
trap 'rc=$?; [[ $- != *e* ]] || echo "pack_gpu.sh: line $LINENO: exit $rc from: $BASH_COMMAND" >&2' ERR
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build-gpu
PACK=$ROOT/.gpu
JOBS=${DIT_JOBS:-1}
DO_BUILD=1
COMPRESS=1
DIFFUSERS_SRC=${DIT_DIFFUSERS_SRC:-}
while [[ $# -gt 0 ]]; do
  case $1 in
    --from) BUILD=$(cd "$2" && pwd); DO_BUILD=0; shift 2 ;;
    --pack) PACK=$(mkdir -p "$2" && cd "$2" && pwd); shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --no-compress) COMPRESS=0; shift ;;
    --diffusers-src) DIFFUSERS_SRC=$2; shift 2 ;;
    *) echo "pack_gpu.sh: unknown argument $1 (expected --jobs N, --from DIR, --pack DIR, --no-compress, --diffusers-src DIR)" >&2
       exit 2 ;;
  esac
done
MULTIARCH=/usr/lib/x86_64-linux-gnu
OMPI_PLUGINS=$MULTIARCH/openmpi/lib/openmpi3
PMIX_DIR=$MULTIARCH/pmix2
for need in "$OMPI_PLUGINS/mca_btl_vader.so" /usr/bin/orterun /usr/bin/orted "$PMIX_DIR/lib/pmix"; do
  [[ -e $need ]] || { echo "pack_gpu.sh: $need is missing (apt-get install openmpi-bin libopenmpi-dev)" >&2; exit 1; }
done

# ---- 1. the CUDA Release build ---------------------------------------------------------------
if [[ $DO_BUILD == 1 ]]; then
  # No build RPATH: the packed binaries find every library through LD_LIBRARY_PATH.
  cmake -S "$ROOT" -B "$BUILD" -DDIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_SKIP_BUILD_RPATH=ON >"$BUILD.cmake.log" 2>&1 ||
    { cat "$BUILD.cmake.log"; exit 1; }
  cmake --build "$BUILD" -j "$JOBS" --target dit_mp dit_tests dit_mpi_tests bench_train bench_attention \
    bench_vae
fi
BINS=("$BUILD/bin/dit_mp" "$BUILD/bin/bench_train" "$BUILD/bin/bench_attention" "$BUILD/bin/bench_vae")
for b in "${BINS[@]}"; do
  [[ -x $b ]] || { echo "pack_gpu.sh: $b was not built (cmake --build $BUILD --target $(basename "$b"))" >&2; exit 1; }
done
for t in dit_tests dit_mpi_tests; do
  if [[ -x $BUILD/tests/$t ]]; then BINS+=("$BUILD/tests/$t")
  else echo "pack_gpu.sh: warning: no $BUILD/tests/$t: the pack has no $t" >&2; fi
done

# ---- 2. binaries, OpenMPI runtime, PMIx plugins ------------------------------------------------
# Only an earlier pack (it has env.sh) or an empty folder is replaced.
if [[ -d $PACK && -n $(ls -A "$PACK") && ! -f $PACK/env.sh ]] || [[ $PACK == "$ROOT" || $PACK == / ]]; then
  echo "pack_gpu.sh: $PACK is not empty and holds no earlier pack; choose another --pack" >&2; exit 1
fi
rm -rf "$PACK"
mkdir -p "$PACK"/{bin,lib,data} "$PACK"/mpi/{bin,etc,lib/openmpi3,share/openmpi} \
  "$PACK"/pmix/{etc,lib/pmix,share/pmix}
for b in "${BINS[@]}"; do cp "$b" "$PACK/bin/"; strip --strip-unneeded "$PACK/bin/$(basename "$b")"; done
cp /usr/bin/orterun "$PACK/mpi/bin/orterun"
cp /usr/bin/orterun "$PACK/mpi/bin/mpirun"  # a copy, not a link: links travel only as links
cp /usr/bin/orted "$PACK/mpi/bin/orted"
# Plugins for one node (shared memory, TCP, ob1); not those needing UCX, libfabric, PSM or verbs.
for f in "$OMPI_PLUGINS"/*.so; do
  case $(basename "$f") in
    *ucx*|*ofi*|*openib*|*psm*|*verbs*|*reachable_netlink*|*java*) continue ;;
    mca_spml_*|mca_sshmem_*|mca_scoll_*|mca_memheap_*|mca_atomic_*) continue ;;  # OpenSHMEM
  esac
  cp "$f" "$PACK/mpi/lib/openmpi3/"
done
cp /usr/share/openmpi/help-*.txt "$PACK/mpi/share/openmpi/"
cat >"$PACK/mpi/etc/openmpi-mca-params.conf" <<'EOF'
# The packed OpenMPI (scripts/pack_gpu.sh): one node, shared memory and TCP only.
btl_base_warn_component_unused = 0
mca_base_component_show_load_errors = 0
btl = self,vader,tcp
pml = ob1
osc = ^ucx,pt2pt
EOF
cp "$PMIX_DIR"/lib/pmix/*.so "$PACK/pmix/lib/pmix/"
cp "$PMIX_DIR"/share/pmix/help-*.txt "$PACK/pmix/share/pmix/"
echo "# The packed PMIx: its component path comes from PMIX_MCA_mca_base_component_path (env.sh)." \
  >"$PACK/pmix/etc/pmix-mca-params.conf"

# ---- 3. the shared-library closure --------------------------------------------------------------
# Stubs first, so that ldd resolves libcurl and libcrypto to them and their closures stay out.
# Each exports, under its version node, exactly the symbols HDF5 imports from that library; every
# function returns 0 (curl_global_init: CURLE_OK; curl_easy_init, EVP_sha256, HMAC, SHA256: NULL,
# which HDF5's ros3 driver reports as a failure). Nothing else in the closure may import them.
# awk reads all of ldd's output (no 'exit' at the match): under pipefail a reader that stops
# early fails the pipeline whenever ldd is still writing (scripts/check_pipes.py).
HDF5_LIB=$(ldd "$PACK/bin/dit_mp" | awk '$1 ~ /^libhdf5[^_]*(_serial)?\.so/ && $1 !~ /hl/ && !found {print $3; found = 1}')
[[ -n $HDF5_LIB ]] || { echo "pack_gpu.sh: dit_mp links no libhdf5" >&2; exit 1; }
stub_dir=$(mktemp -d)
make_stub() {  # $1: soname, $2: symbol version prefix (CURL_ / OPENSSL_)
  local soname=$1 prefix=$2 imports syms node
  imports=$(nm -D --undefined-only "$HDF5_LIB" | awk -v p="@$prefix" 'index($2, p) {print $2}')
  syms=$(sed 's/@.*//' <<<"$imports" | sort -u)
  node=$(sed -n '1s/.*@//p' <<<"$imports")
  [[ -n $syms ]] || { echo "pack_gpu.sh: $HDF5_LIB imports nothing of $soname: no stub needed" >&2; return 0; }
  {
    echo "/* $soname stub for the GPU pack (scripts/pack_gpu.sh): HDF5's ros3 driver only. */"
    for f in $syms; do echo "void* $f(void) { return 0; }"; done
  } >"$stub_dir/$soname.c"
  { echo "$node {"; echo "  global:"; for f in $syms; do echo "    $f;"; done; echo "  local: *;"; echo "};"; } \
    >"$stub_dir/$soname.map"
  cc -shared -fPIC -O1 -o "$PACK/lib/$soname" "$stub_dir/$soname.c" -Wl,-soname,"$soname" \
    -Wl,--version-script="$stub_dir/$soname.map"
  echo "  $soname: a stub of $(echo "$syms" | wc -w) functions ($node) for $(basename "$HDF5_LIB")"
}
echo "stubs for HDF5's network and crypto dependencies:"
make_stub libcurl.so.4 CURL_
make_stub libcrypto.so.3 OPENSSL_
rm -rf "$stub_dir"
# Left out: glibc's libraries, the C++ runtime, and CUDA/cuBLAS/cuDNN/NCCL (from the GPU host).
skip_lib() {
  case $1 in
    linux-vdso*|ld-linux*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libresolv.so*) return 0 ;;
    libutil.so*|libanl.so*|libmvec.so*|libnss_*|libBrokenLocale*|libthread_db*) return 0 ;;
    libstdc++.so*|libgcc_s.so*) return 0 ;;
    libcuda.so*|libcudart*|libcublas*|libcudnn*|libnccl*|libnvrtc*|libnvJitLink*|libnvidia*) return 0 ;;
  esac
  return 1
}
closure_of=("$PACK"/bin/* "$PACK"/mpi/bin/* "$PACK"/mpi/lib/openmpi3/*.so "$PACK"/pmix/lib/pmix/*.so)
missing=()
while read -r name arrow path _; do
  [[ $arrow == "=>" ]] || continue
  skip_lib "$name" && continue
  if [[ $path == "not" ]]; then missing+=("$name"); continue; fi
  [[ -e $PACK/lib/$name ]] || cp -L "$path" "$PACK/lib/$name"
done < <(LD_LIBRARY_PATH=$PACK/lib ldd "${closure_of[@]}" 2>/dev/null | sort -u)
# Libraries that plugins open by name at run time (not in any ldd output).
for extra in libmca_common_sm.so.40 libmca_common_monitoring.so.50 libmca_common_ompio.so.41; do
  [[ -e $PACK/lib/$extra ]] || cp -L "$MULTIARCH/$extra" "$PACK/lib/$extra"
done
[[ ${#missing[@]} -eq 0 ]] || { echo "pack_gpu.sh: unresolved libraries: ${missing[*]}" >&2; exit 1; }
# Any other user of the stubbed libraries would break at run time: refuse to pack then.
for f in "$PACK"/bin/* "$PACK"/lib/*.so*; do
  [[ $(basename "$f") == "$(basename "$HDF5_LIB")" || $f == "$PACK/lib/libcurl.so.4" || $f == "$PACK/lib/libcrypto.so.3" ]] && continue
  if grep -qE 'NEEDED.*\[(libcurl\.so\.4|libcrypto\.so\.3)\]' <<<"$(readelf -d "$f" 2>/dev/null)"; then
    echo "pack_gpu.sh: $f needs libcurl or libcrypto, which the pack stubs for HDF5 only" >&2; exit 1
  fi
done

# ---- 4. env.sh: what makes the moved OpenMPI and PMIx find themselves ------------------------
cat >"$PACK/env.sh" <<'EOF'
# Source this (bash) to use the packed OpenMPI: it points OpenMPI's and PMIx's install
# directories at this folder. Sets DIT_PACK (this folder) and DIT_PACK_LIB (prepend it to
# LD_LIBRARY_PATH for dit_mp, dit_tests, bench_train and mpirun; it is not exported here, so
# other programs, python with torch among them, keep their own libraries).
DIT_PACK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DIT_PACK_LIB=$DIT_PACK/lib
export OPAL_PREFIX=$DIT_PACK/mpi OPAL_EXEC_PREFIX=$DIT_PACK/mpi OPAL_BINDIR=$DIT_PACK/mpi/bin \
  OPAL_LIBDIR=$DIT_PACK/lib OPAL_PKGLIBDIR=$DIT_PACK/mpi/lib/openmpi3 \
  OPAL_DATAROOTDIR=$DIT_PACK/mpi/share OPAL_DATADIR=$DIT_PACK/mpi/share \
  OPAL_PKGDATADIR=$DIT_PACK/mpi/share/openmpi OPAL_SYSCONFDIR=$DIT_PACK/mpi/etc
export OMPI_MCA_mca_base_component_path=$DIT_PACK/mpi/lib/openmpi3
export OMPI_MCA_mca_base_param_files=$DIT_PACK/mpi/etc/openmpi-mca-params.conf
export PMIX_PREFIX=$DIT_PACK/pmix PMIX_EXEC_PREFIX=$DIT_PACK/pmix PMIX_LIBDIR=$DIT_PACK/lib \
  PMIX_PKGLIBDIR=$DIT_PACK/pmix/lib/pmix PMIX_DATAROOTDIR=$DIT_PACK/pmix/share \
  PMIX_DATADIR=$DIT_PACK/pmix/share PMIX_PKGDATADIR=$DIT_PACK/pmix/share/pmix \
  PMIX_SYSCONFDIR=$DIT_PACK/pmix/etc PMIX_MCA_mca_base_component_path=$DIT_PACK/pmix/lib/pmix
# hwloc's plugins (PCI, OpenCL, GL discovery) stay out: the host has no such folder either.
export HWLOC_PLUGINS_PATH=$DIT_PACK/mpi/lib/hwloc
# As root, more ranks than cores; no CMA single copy (may be refused inside VMs and containers).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
  OMPI_MCA_btl_vader_single_copy_mechanism=none
DIT_MPIRUN=$DIT_PACK/mpi/bin/mpirun
EOF

# ---- 5. a small dataset: 128 random latents 4x16x16, 10 classes --------------------------------
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 - "$tmp" <<'PY'
import os, sys
import numpy as np
root = sys.argv[1]
rng = np.random.default_rng(0)
for sub in ("features", "labels"):
    os.makedirs(os.path.join(root, sub))
for i in range(128):
    np.save(os.path.join(root, "features", f"{i}.npy"), rng.standard_normal((1, 4, 16, 16)).astype("<f4") * 5)
    np.save(os.path.join(root, "labels", f"{i}.npy"), np.array([i % 10], dtype=np.int64))
PY
# pack_env CMD: runs CMD in a clean environment with the pack's env.sh and LD_LIBRARY_PATH = its lib/.
pack_env() {
  env -i PATH=/usr/bin:/bin HOME="${HOME:-/root}" TMPDIR=/tmp \
    bash -c "source '$PACK/env.sh'; export LD_LIBRARY_PATH=\$DIT_PACK_LIB; $1"
}
pack_env "'$PACK/bin/dit_mp' prepare-data latents --features '$tmp/features' --labels '$tmp/labels' \
  --out '$PACK/data/latents16.h5'" >"$tmp/prepare.log" 2>&1 || { cat "$tmp/prepare.log"; exit 1; }

# ---- 6. check the pack here: MPI from .gpu/ only -------------------------------------------------
check_loaded() {  # $1: LD_DEBUG_OUTPUT prefix, $2: what ran
  local bad
  bad=$(cat "$1".* | grep -o 'calling init: .*' | sed 's/calling init: //' | sort -u |
    grep -E 'libmpi|libopen-(pal|rte)|libpmix|libhdf5|libevent|hwloc|/mca_|pmix_mca|libcurl|libcrypto' | grep -v "^$PACK/" || true)
  local n
  n=$(cat "$1".* | grep -o 'calling init: .*' | sort -u | grep -c "$PACK/" || true)
  if [[ -n $bad ]]; then
    echo "pack_gpu.sh: $2 loaded MPI/HDF5 parts from outside the pack:" >&2; echo "$bad" >&2; exit 1
  fi
  echo "  $2: $n libraries and plugins loaded from the pack, none of MPI/PMIx/HDF5/hwloc/curl/crypto from elsewhere"
}
echo "checking the pack (LD_LIBRARY_PATH = .gpu/lib only):"
pack_env "LD_DEBUG=libs LD_DEBUG_OUTPUT='$tmp/ld2' timeout 120 \$DIT_MPIRUN -np 2 '$PACK/bin/dit_mp' verify \
  --golden '$ROOT/tests/data/dit_tiny_golden.h5' --tp 2" >"$tmp/mpi2.log" 2>&1 ||
  { cat "$tmp/mpi2.log"; echo "pack_gpu.sh: 2 ranks under the packed mpirun failed" >&2; exit 1; }
check_loaded "$tmp/ld2" "mpirun -np 2 dit_mp verify --tp 2"
pack_env "LD_DEBUG=libs LD_DEBUG_OUTPUT='$tmp/ld1' timeout 120 '$PACK/bin/dit_mp' verify \
  --golden '$ROOT/tests/data/dit_tiny_golden.h5' --groups forward" >"$tmp/mpi1.log" 2>&1 ||
  { cat "$tmp/mpi1.log"; echo "pack_gpu.sh: the singleton dit_mp failed" >&2; exit 1; }
check_loaded "$tmp/ld1" "singleton dit_mp verify"
pack_env "OMP_NUM_THREADS=1 timeout 300 '$PACK/bin/bench_train' --model DiT-S/4 --input-size 16 --num-classes 10 \
  --batch 2 --steps 1 --warmup 1" >"$tmp/bench.log" 2>&1 ||
  { cat "$tmp/bench.log"; echo "pack_gpu.sh: bench_train (cpu) failed" >&2; exit 1; }
echo "  bench_train --backend cpu: ran"
pack_env "OMP_NUM_THREADS=2 timeout 120 '$PACK/bin/bench_vae' --backend cpu --threads 2 --size 16 --iters 1 \
  --warmup 0" >"$tmp/bench_vae.log" 2>&1 || { cat "$tmp/bench_vae.log"; echo "pack_gpu.sh: bench_vae (cpu) failed" >&2; exit 1; }
echo "  bench_vae --backend cpu: ran"

# ---- 7. diffusers' VAE for the PyTorch baseline of stage 9 (optional) ---------------------------
# The files are those the import of benchmarks/vae_torch.py loads from the tree (asked of a python
# with torch here), plus the top-level modules of diffusers/, models/ and utils/ (what PyTorch 2.x
# may import lazily on other paths); then vae_torch.py runs once from the packed copy alone.
pack_diffusers() {
  local src=$DIFFUSERS_SRC root py list
  [[ -n $src ]] || { echo "diffusers: not packed: no DIT_DIFFUSERS_SRC or --diffusers-src (stage 9 times dit_mp's VAE alone)"; return 0; }
  root=$src; [[ -d $src/src/diffusers ]] && root=$src/src
  [[ -f $root/diffusers/models/autoencoders/autoencoder_kl.py ]] ||
    { echo "diffusers: not packed: $src holds no diffusers/models/autoencoders/autoencoder_kl.py"; return 0; }
  py=""
  for p in python3 /usr/bin/python3; do
    command -v "$p" >/dev/null && "$p" -c "import torch" >/dev/null 2>&1 && { py=$p; break; }
  done
  [[ -n $py ]] || { echo "diffusers: not packed: no python with torch here to list the files vae_torch.py imports"; return 0; }
  list=$("$py" - "$ROOT/benchmarks" "$root" <<'PY' 2>"$tmp/diffusers_list.log"
import glob, os, sys
bench, root = sys.argv[1], os.path.realpath(sys.argv[2])
sys.path.insert(0, bench)
import vae_torch
vae_torch.load_diffusers(root)
files = {os.path.realpath(m.__file__) for m in list(sys.modules.values()) if getattr(m, "__file__", None)}
files = {f for f in files if f.startswith(root + os.sep)}
for d in ("diffusers", "diffusers/models", "diffusers/utils"):
    files.update(os.path.realpath(f) for f in glob.glob(os.path.join(root, d, "*.py")))
print("\n".join(sorted(os.path.relpath(f, root) for f in files)))
PY
) || { cat "$tmp/diffusers_list.log"; echo "diffusers: not packed: importing it from $root failed (above)"; return 0; }
  mkdir -p "$PACK/diffusers/src"
  # shellcheck disable=SC2086  # one relative path a word (diffusers' file names have no spaces)
  (cd "$root" && tar cf - $list) | tar xf - -C "$PACK/diffusers/src"
  OMP_NUM_THREADS=2 timeout 120 "$py" "$ROOT/benchmarks/vae_torch.py" --diffusers-src "$PACK/diffusers" --size 16 \
    --iters 1 --warmup 0 --threads 2 >"$tmp/vae_torch.log" 2>&1 ||
    { cat "$tmp/vae_torch.log"; echo "pack_gpu.sh: vae_torch.py failed on the packed diffusers files" >&2; exit 1; }
  echo "diffusers: $(wc -w <<<"$list") files ($(du -sk "$PACK/diffusers" | cut -f1) KiB) from $root;" \
    "vae_torch.py ran from them ($(grep -m1 -o 'torch [^,]*' "$tmp/vae_torch.log"))"
}
pack_diffusers

# ---- 8. compress: what travels is env.sh, data/ and one archive (run.sh unpacks it) -----------
unpacked=$(du -sm "$PACK" | cut -f1)
nlibs=$(find "$PACK/lib" -name '*.so*' | wc -l)
if [[ $COMPRESS == 1 ]]; then
  # xz -9: its 64 MiB window spans the tar, so the code the binaries share is stored once.
  # DIT_PACK_XZ_LEVEL (0-9, default 9) is the preset, the window staying 64 MiB: cli.gpu_check packs
  # with 1 (measured: 10 s instead of 61 s on 2 cores, 9.4 MiB instead of 8.5), an archive at least
  # as large, so the carry it holds under the budget bounds this default's.
  level=${DIT_PACK_XZ_LEVEL:-9}
  [[ $level =~ ^[0-9]$ ]] || { echo "pack_gpu.sh: DIT_PACK_XZ_LEVEL=$level: expected 0 to 9" >&2; exit 2; }
  parts=(bin lib mpi pmix); [[ -d $PACK/diffusers ]] && parts+=(diffusers)
  tar cf - -C "$PACK" "${parts[@]}" | xz -T1 --lzma2=preset="$level",dict=64MiB >"$PACK/pack.tar.xz"
  rm -rf "${PACK:?}"/{bin,lib,mpi,pmix,diffusers}
fi
size_b=$(du -sb "$PACK" | cut -f1)
# What the device tool carries: the pack plus the working tree it copies (tracked files and
# untracked ones git does not ignore); together they must stay under 48 MiB of its 64.
tree_b=$(git -C "$ROOT" ls-files -z --cached --others --exclude-standard | (cd "$ROOT" && du -cb --files0-from=- 2>/dev/null) | tail -1 | cut -f1)
carry_b=$((size_b + tree_b))
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
echo "packed $PACK: $(mib "$size_b") MiB (${unpacked} MiB unpacked: binaries, $nlibs libraries, OpenMPI, data)"
echo "carry size: $(mib "$carry_b") MiB = .gpu/ $(mib "$size_b") MiB + working tree $(mib "$tree_b") MiB (budget 48 MiB)"
if (( carry_b >= 48 * 1048576 )); then
  echo "pack_gpu.sh: the carry is $(mib "$carry_b") MiB, over its 48 MiB budget" >&2; exit 1
fi
echo "device command: bash benchmarks/gpu/run.sh --build .gpu --out \$OUT   (carry [\".gpu\"], timeout_s 360; docs/gpu.md)"

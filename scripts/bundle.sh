#!/usr/bin/env bash
# Builds dist/shardtrain-<version>-linux-x86_64.tar.gz: the stripped binary (CUDA/NCCL compiled in
# when the build machine has nvcc and nccl.h, and then the GPU tests beside it), every shared
# library it needs that is not glibc, the CUDA driver or part of the torch wheel (Open MPI with its
# components, mpirun/orted, PMIx, hwloc, parallel HDF5, Boost.Program_options, SentencePiece,
# libfabric, ...), and bench/, launch/, slurm/, configs/ and the demo data. Libraries resolve
# through RUNPATH $ORIGIN/../lib; the launcher bin/shardtrain finds LibTorch in the target's torch
# wheel (docs/bundle.md).
#
#   scripts/bundle.sh               # builds the binary if needed, writes dist/<name>.tar.gz
# Env: BUILD_DIR (build), DIST_DIR (dist), BUNDLE_SKIP_BUILD=1 to package an existing build,
#      PYTHON (<repo>/.venv/bin/python) or SHARDTRAIN_TORCH (a torch package directory).
# scripts/bundle-portable.sh runs this in a Debian 11 root, for glibc 2.31 targets (docs/bundle.md).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$repo/build}
dist=${DIST_DIR:-$repo/dist}
py=${PYTHON:-$repo/.venv/bin/python}
[ "${BUNDLE_SKIP_BUILD:-0}" = 1 ] || BUILD_TARGET=shardtrain "$repo/scripts/build.sh" > "$build.bundle-build.log" 2>&1 \
  || { tail -30 "$build.bundle-build.log"; exit 1; }
exe=$build/src/shardtrain
[ -x "$exe" ] || { echo "bundle.sh: $exe is not built" >&2; exit 1; }
command -v patchelf > /dev/null || { echo "bundle.sh: patchelf is missing; run scripts/install-deps.sh" >&2; exit 1; }

version=$("$exe" --version | awk '{print $2}')
name=shardtrain-$version-linux-x86_64
stage_parent=$(mktemp -d)
trap 'rm -rf "$stage_parent"' EXIT
root=$stage_parent/$name
arch=x86_64-linux-gnu
ompi_lib=/usr/lib/$arch/openmpi/lib/openmpi3   # Open MPI's components (Debian's pkglibdir)
pmix_lib=/usr/lib/$arch/pmix2/lib/pmix         # PMIx's plugins
hwloc_pci=/usr/lib/$arch/hwloc/hwloc_pci.so     # hwloc's PCI discovery (GPU/NIC locality); not its X11/OpenCL/libxml ones
# Inside the bundle Open MPI keeps Debian's layout relative to its prefix, so OPAL_PREFIX alone
# relocates it, on this node and on nodes that mpirun reaches over ssh (--prefix).
bundle_ompi_lib=lib/$arch/openmpi/lib/openmpi3
mkdir -p "$root"/{bin,libexec,lib/pmix,lib/hwloc,"$bundle_ompi_lib",etc/openmpi,share/shardtrain}

# The torch wheel the binary was linked against: its libraries (and NVIDIA's wheels) stay outside.
# SHARDTRAIN_TORCH names the torch package directory instead (scripts/bundle-portable.sh: a wheel
# for a newer Python than the build root's); neither way imports torch.
torch_dir=${SHARDTRAIN_TORCH:-$("$py" -c 'import importlib.util as u; print(u.find_spec("torch").submodule_search_locations[0])')}
torch_version=$(sed -n "s/^__version__ = '\(.*\)'.*/\1/p" "$torch_dir/version.py")
[ -n "$torch_version" ] || { echo "bundle.sh: no torch version in $torch_dir/version.py" >&2; exit 1; }
site_dir=$(dirname "$torch_dir")

# Libraries that the target provides: glibc, the CUDA driver, and whatever the torch wheel and the
# NVIDIA wheels ship (LibTorch, libgomp, the CUDA runtime, NCCL, cuBLAS, ...).
from_target() {  # SONAME PATH
  case "$1" in
    linux-vdso.so.*|ld-linux-x86-64.so.*|libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libutil.so.*|libresolv.so.*|libanl.so.*) return 0 ;;
    libcuda.so.*|libnvidia-*) return 0 ;;
    libtorch*|libc10*|libgomp.so.*|libcudart.so.*|libnccl.so.*|libcublas*|libnvrtc*|libcudnn*|libcusparse*|libcufft*|libcurand*|libnvJitLink*|libnvToolsExt*|libcupti*) return 0 ;;
  esac
  case "$2" in "$site_dir"/*|/usr/local/cuda*) return 0 ;; esac
  return 1
}

# Open MPI components that pull in UCX or Java, which the bundle leaves out (shardtrain's data
# path is NCCL; MPI only bootstraps and checkpoints, over TCP and shared memory).
skip_component() { case "$(basename "$1")" in *ucx*|*_uct.so|*java*) return 0 ;; esac; return 1; }

declare -A wanted=()  # soname -> resolved path
collect() {  # FILE...: records the non-target libraries that FILE needs, transitively (ldd)
  local f line so path
  for f in "$@"; do
    while read -r line; do
      [[ $line == *" => "* ]] || continue  # the vdso and the dynamic loader have no path
      so=${line%% => *}; so=${so//[[:space:]]/}
      path=${line#* => }; path=${path%% (*}
      if [ "$path" = "not found" ]; then echo "bundle.sh: $f needs $so, which is not found" >&2; exit 1; fi
      from_target "$so" "$path" || wanted[$so]=$path
    done < <(LD_LIBRARY_PATH="$torch_dir/lib" ldd "$f")
  done
}

cp "$exe" "$root/libexec/shardtrain"
strip --strip-unneeded "$root/libexec/shardtrain"
collect "$exe"
# The GPU tests (tests/cpp/cuda), when CUDA/NCCL is compiled in and the build has its tests: a GPU
# machine runs them from the bundle (libexec/tests/run; bench/gpu_suite.sh --parts tests).
gpu_tests=(test_gpu test_gpu_mpi)
if readelf -d "$exe" | grep -q libnccl && grep -q '^SHARDTRAIN_BUILD_TESTS:BOOL=ON' "$build/CMakeCache.txt"; then
  [ "${BUNDLE_SKIP_BUILD:-0}" = 1 ] || cmake --build "$build" -j "${JOBS:-$(nproc)}" --target "${gpu_tests[@]}" \
    >> "$build.bundle-build.log" 2>&1 || { tail -30 "$build.bundle-build.log"; exit 1; }
  mkdir -p "$root/libexec/tests"
  for t in "${gpu_tests[@]}"; do
    [ -x "$build/tests/$t" ] || { echo "bundle.sh: $build/tests/$t is not built (cmake --build $build --target $t)" >&2; exit 1; }
    cp "$build/tests/$t" "$root/libexec/tests/$t"
    strip --strip-unneeded "$root/libexec/tests/$t"
    collect "$build/tests/$t"
  done
  cp "$repo/scripts/bundle/run-test" "$root/libexec/tests/run"
fi
for b in orterun orted; do cp "$(readlink -f "/usr/bin/$b")" "$root/bin/$b"; collect "/usr/bin/$b"; done
for c in "$ompi_lib"/*.so; do
  skip_component "$c" && continue
  cp "$c" "$root/$bundle_ompi_lib/"; collect "$c"
done
for c in "$pmix_lib"/*.so; do cp "$c" "$root/lib/pmix/"; collect "$c"; done
cp "$hwloc_pci" "$root/lib/hwloc/"; collect "$hwloc_pci"
for so in "${!wanted[@]}"; do cp -L "${wanted[$so]}" "$root/lib/$so"; done
# Where each file came from, for tests/bundle/test_bundle.sh (it hides those packages' copies).
{
  for so in "${!wanted[@]}"; do printf 'lib/%s\t%s\n' "$so" "$(readlink -f "${wanted[$so]}")"; done
  for b in orterun orted; do printf 'bin/%s\t%s\n' "$b" "$(readlink -f "/usr/bin/$b")"; done
  for c in "$root/$bundle_ompi_lib"/*.so; do printf '%s\t%s\n' "$bundle_ompi_lib/${c##*/}" "$ompi_lib/${c##*/}"; done
  for c in "$root"/lib/pmix/*.so; do printf 'lib/pmix/%s\t%s\n' "${c##*/}" "$pmix_lib/${c##*/}"; done
  printf 'lib/hwloc/hwloc_pci.so\t%s\n' "$hwloc_pci"
} | sort > "$root/share/shardtrain/origins.tsv"

# RUNPATHs: every object finds the others in lib/; torch's come from LD_LIBRARY_PATH (launcher).
for f in "$root"/lib/*.so*; do patchelf --set-rpath '$ORIGIN' "$f"; done
for f in "$root"/lib/pmix/*.so "$root"/lib/hwloc/*.so; do patchelf --set-rpath '$ORIGIN/..' "$f"; done
for f in "$root/$bundle_ompi_lib"/*.so; do patchelf --set-rpath '$ORIGIN/../../../..' "$f"; done
for f in "$root/libexec/shardtrain" "$root/bin/orterun" "$root/bin/orted"; do patchelf --set-rpath '$ORIGIN/../lib' "$f"; done
for t in "${gpu_tests[@]}"; do [ ! -f "$root/libexec/tests/$t" ] || patchelf --set-rpath '$ORIGIN/../../lib' "$root/libexec/tests/$t"; done
strip --strip-unneeded "$root"/lib/*.so* "$root"/lib/pmix/*.so "$root"/lib/hwloc/*.so "$root/$bundle_ompi_lib"/*.so "$root/bin/orterun" "$root/bin/orted" 2> /dev/null || true

# Open MPI's and PMIx's help texts and defaults (Debian's MCA defaults: no UCX, no openib).
cp -r /usr/share/openmpi "$root/share/openmpi"
[ -d /usr/lib/$arch/pmix2/share/pmix ] && cp -r /usr/lib/$arch/pmix2/share/pmix "$root/share/pmix"
cp /etc/openmpi/openmpi-mca-params.conf /etc/openmpi/openmpi-default-hostfile "$root/etc/openmpi/"

cp "$repo/scripts/bundle/env.sh" "$repo/scripts/bundle/torch_env.sh" "$root/libexec/"
cp "$repo/scripts/bundle/shardtrain" "$repo/scripts/bundle/mpirun" "$root/bin/"
chmod +x "$root/bin/shardtrain" "$root/bin/mpirun"
echo "$torch_version" > "$root/share/shardtrain/torch-version"
cuda=no; readelf -d "$root/libexec/shardtrain" | grep -q 'libnccl' && cuda=yes
echo "$cuda" > "$root/share/shardtrain/cuda"

# Scripts, configs and the demo data (the demo's tokenizer and JSONL; prepare makes the rest).
cp -r "$repo/bench" "$repo/launch" "$repo/slurm" "$repo/configs" "$root/"
mkdir -p "$root/data" && cp -r "$repo/data/demo" "$root/data/"
cp "$repo/docs/bundle.md" "$root/README.md"

# The oldest glibc the bundle runs on: the newest GLIBC_ symbol version any of its objects needs.
glibc=$(find "$root" -type f \( -name '*.so*' -o -path '*/bin/*' -o -path '*/libexec/*' \) -exec sh -c \
  'objdump -T "$1" 2>/dev/null' _ {} \; | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
{
  echo "shardtrain $version, built $(date -u +%Y-%m-%d) on $(. /etc/os-release; echo "$PRETTY_NAME")"
  echo "torch $torch_version, CUDA/NCCL compiled in: $cuda, needs glibc >= ${glibc#GLIBC_}"
  echo "GPU tests: $([ -d "$root/libexec/tests" ] && (cd "$root/libexec/tests" && ls -I run | paste -sd' ' -) || echo none)"
  echo "libraries:"; (cd "$root/lib" && ls *.so* | sed 's/^/  /')
} > "$root/share/shardtrain/MANIFEST"

mkdir -p "$dist"
tarball=$dist/$name.tar.gz
tar -C "$stage_parent" -czf "$tarball" "$name"
size=$(stat -c %s "$tarball")
echo "bundle.sh: $tarball ($(( size / 1000000 )) MB, $(ls "$root"/lib/*.so* | wc -l) libraries, torch $torch_version, CUDA $cuda, glibc >= ${glibc#GLIBC_})"

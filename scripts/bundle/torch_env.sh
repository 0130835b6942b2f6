# Sourced by the bundle's bin/shardtrain and libexec/tests/run, after env.sh, with $root set to the
# unpacked bundle: finds LibTorch and NVIDIA's libraries in the installed torch wheel, checks its
# version against the one the binary was built with, and puts them on LD_LIBRARY_PATH.
# Env: SHARDTRAIN_TORCH (a torch package directory, instead of asking python3),
#      SHARDTRAIN_PYTHON (the python that has torch; default python3).
want=$(cat "$root/share/shardtrain/torch-version")  # e.g. 2.11.0+cu130
cuda=$(cat "$root/share/shardtrain/cuda")
install_hint="install it with: python3 -m pip install torch==${want%%+*}, or set SHARDTRAIN_TORCH to a torch ${want%.*} package directory"
if [ -z "${SHARDTRAIN_TORCH:-}" ]; then
  py=${SHARDTRAIN_PYTHON:-python3}
  command -v "$py" > /dev/null || { echo "shardtrain: no $py to find torch with; $install_hint" >&2; exit 2; }
  # find_spec locates the package without importing it (an import takes seconds per rank).
  SHARDTRAIN_TORCH=$(LD_LIBRARY_PATH=$system_ld_path "$py" -c 'import importlib.util as u; s = u.find_spec("torch"); print(s.submodule_search_locations[0] if s else "")')
  [ -n "$SHARDTRAIN_TORCH" ] || { echo "shardtrain: $py has no torch package; this bundle needs torch $want; $install_hint" >&2; exit 2; }
  export SHARDTRAIN_TORCH  # ranks that mpirun starts from here inherit it
fi
got=$(sed -n "s/^__version__ = '\(.*\)'.*/\1/p" "$SHARDTRAIN_TORCH/version.py" 2> /dev/null || true)
case "$got" in
  "${want%.*}".*) ;;  # same major.minor: LibTorch's C++ ABI is stable within a release series
  *) echo "shardtrain: this bundle was built against torch $want, but $SHARDTRAIN_TORCH has torch ${got:-of unknown version}; $install_hint" >&2; exit 2 ;;
esac
if [ "$cuda" = yes ] && [ ! -d "$SHARDTRAIN_TORCH/../nvidia" ]; then
  echo "shardtrain: this bundle has CUDA/NCCL compiled in and needs a CUDA build of torch (${want#*+}) with NVIDIA's wheels, but $SHARDTRAIN_TORCH (torch $got) has none; $install_hint" >&2
  exit 2
fi
nvidia=""
for d in "$SHARDTRAIN_TORCH"/../nvidia/*/lib; do [ -d "$d" ] && nvidia+=":$(cd "$d" && pwd)"; done
export LD_LIBRARY_PATH=$bundle_ld_path:$SHARDTRAIN_TORCH/lib$nvidia

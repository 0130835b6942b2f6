#!/usr/bin/env bash
# Installs everything shardtrain needs on Debian 12, idempotently: Debian packages system-wide,
# LibTorch (the PyPI torch wheel) and the Python test tools into a project virtual environment.
# Usage: scripts/install-deps.sh            (root, or a user with sudo)
# Env:   SHARDTRAIN_VENV (default: <repo>/.venv), SHARDTRAIN_SKIP_APT=1 to skip apt.
#        SHARDTRAIN_DEPS=build: only what building the binary needs (the container image's build
#        stage): BUILD_PACKAGES and the torch wheel, without the test tools.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${SHARDTRAIN_VENV:-$repo/.venv}

# Pinned: 2.11.x matches the GPU machine's torch (+cu130).
TORCH_VERSION=2.11.0
# protobuf: transformers converts a tokenizer.model to its fast tokenizer through sentencepiece
# 0.1.99's generated sentencepiece_model_pb2, which protobuf 4 and later refuse to load.
# tensorboard: its own reader checks --tensorboard's event files (2.20.0 accepts protobuf 3.20.3).
# mlflow: a real `mlflow server` and MLflow's client check --mlflow-uri (3.17.2 resolves with protobuf 3.20.3).
# trl: its DPOTrainer is the reference train --objective dpo is checked against.
PY_TEST_TOOLS=(transformers==5.23.0 safetensors==0.8.0 numpy sentencepiece==0.1.99 protobuf==3.20.3 h5py==3.16.0 pillow==13.0.0 peft==0.21.2 tensorboard==2.20.0 mlflow==3.17.2 trl==1.16.0)

# What building the binary needs; the container image's build stage installs only these.
BUILD_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git ca-certificates
  python3 python3-venv python3-dev
  openmpi-bin libopenmpi-dev
  libhdf5-openmpi-dev zlib1g-dev
  libboost-program-options-dev
  libfabric-dev
  nlohmann-json3-dev
  libsentencepiece-dev
  libpcre2-dev libutf8proc-dev  # tokenizer.json: its regexes (PCRE2) and NFC (utf8proc)
  libprotobuf-dev protobuf-compiler  # --tensorboard: the event files' Event protobufs
  libcurl4-openssl-dev  # --mlflow-uri: MLflow's REST API over HTTP(S)
)
DEBIAN_PACKAGES=(
  "${BUILD_PACKAGES[@]}"
  hdf5-tools libfabric-bin
  libgtest-dev
  patchelf  # scripts/bundle.sh sets the bundle's RUNPATHs
  curl procps  # test tools: the tests scrape /metrics with curl and find ranks with pgrep
  clang libclang-rt-14-dev llvm  # scripts/sanitize.sh: ASan/UBSan/libFuzzer runtimes, llvm-symbolizer
  clang-format  # scripts/check_format.sh (ctest format): the C++ style of .clang-format
  # The local Slurm cluster of ctest slurm_up and Slurm.* (scripts/local-slurm.sh).
  slurm-wlm slurmd slurmctld slurm-client slurm-wlm-basic-plugins munge
  prometheus  # promtool, which ctest Observe.endpoint runs on the /metrics scrapes
)

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)

case "${SHARDTRAIN_DEPS:-all}" in
  all) ;;
  build) DEBIAN_PACKAGES=("${BUILD_PACKAGES[@]}") PY_TEST_TOOLS=() ;;
  *) echo "install-deps.sh: SHARDTRAIN_DEPS=${SHARDTRAIN_DEPS} is not all or build" >&2; exit 2 ;;
esac

if [ "${SHARDTRAIN_SKIP_APT:-0}" != 1 ]; then
  missing=()
  for p in "${DEBIAN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "[install-deps] apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    log=$(mktemp)
    if ! { "${sudo_cmd[@]}" apt-get update -q && \
           "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
      cat "$log"; exit 1
    fi
    rm -f "$log"
  else
    echo "[install-deps] Debian packages present"
  fi
fi

# Debian's own python3 (PEP 668 forbids system-wide pip); the venv isolates torch and test tools.
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
if [ ! -x "$venv/bin/python" ]; then
  echo "[install-deps] creating virtual environment $venv"
  "$py" -m venv "$venv"
fi
have() { "$venv/bin/python" - "$@" <<'PY'
import sys, importlib.metadata as m
for spec in sys.argv[1:]:
    name, _, ver = spec.partition("==")
    try:
        got = m.version(name)
    except m.PackageNotFoundError:
        sys.exit(1)
    if ver and got.split("+")[0] != ver:
        sys.exit(1)
PY
}
if ! have "torch==$TORCH_VERSION" "${PY_TEST_TOOLS[@]}"; then
  echo "[install-deps] pip install torch==$TORCH_VERSION ${PY_TEST_TOOLS[*]}"
  "$venv/bin/pip" install -q --disable-pip-version-check "torch==$TORCH_VERSION" "${PY_TEST_TOOLS[@]}"
else
  echo "[install-deps] Python packages present in $venv"
fi
echo "[install-deps] LibTorch: $("$venv/bin/python" -c 'import torch; print(torch.__version__, torch.utils.cmake_prefix_path)')"

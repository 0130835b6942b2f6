#!/usr/bin/env bash
# The steps of the shardtrain image, shared by containers/Dockerfile (podman/docker) and
# containers/shardtrain.def (Apptainer). Versions: containers/versions.env.
#   build-image.sh build VARIANT     in the build stage, from the source copy at /src/shardtrain:
#                                    builds the binary and stages the image's tree in /opt/shardtrain
#   build-image.sh runtime VARIANT   in the final stage, over that tree: run-time packages only,
#                                    the user shardtrain (uid 1000), a check that every library resolves
#   build-image.sh slim              one-stage builds (Apptainer): removes the build tools and sources
# VARIANT: local (the machine's Debian mirror, Debian's libfabric and Open MPI; no CUDA) or cuda
# (NVIDIA's CUDA repository, the EFA installer, aws-ofi-nccl: for AWS). Everything else is shared.
set -euo pipefail
mode=$1
variant=${2:-cuda}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/versions.env"
export DEBIAN_FRONTEND=noninteractive
prefix=/opt/shardtrain
src=/src/shardtrain
case "$variant" in local|cuda) ;; *) echo "build-image.sh: variant '$variant' is not local or cuda" >&2; exit 2 ;; esac
apt_install() { apt-get install -y -q --no-install-recommends "$@"; }
log() { echo "[build-image $mode/$variant $(date +%H:%M:%S)] $*"; }

# The cuda variant's Debian packages come from one snapshot, so that a rebuild gets the same
# versions; the local base keeps the mirror it was bootstrapped from.
snapshot_sources() {
  [ "$variant" = cuda ] || return 0
  cat > /etc/apt/sources.list <<SRC
deb [check-valid-until=no] http://snapshot.debian.org/archive/debian/$DEBIAN_SNAPSHOT bookworm main
deb [check-valid-until=no] http://snapshot.debian.org/archive/debian-security/$DEBIAN_SNAPSHOT bookworm-security main
SRC
  rm -f /etc/apt/sources.list.d/debian.sources
}

# libfabric with the EFA provider and rdma-core, without the kernel module (the host has it).
efa_install() {
  curl -fsSL "https://efa-installer.amazonaws.com/aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz" | tar -xz -C /tmp
  (cd /tmp/aws-efa-installer && ./efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify)
  rm -rf /tmp/aws-efa-installer
}

build() {
  snapshot_sources
  apt-get update -q
  apt_install ca-certificates curl
  local cuda_env=()
  if [ "$variant" = cuda ]; then
    apt_install gnupg autoconf automake libtool libhwloc-dev pciutils
    curl -fsSLO "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_${CUDA_KEYRING_VERSION}_all.deb"
    dpkg -i "cuda-keyring_${CUDA_KEYRING_VERSION}_all.deb" && rm "cuda-keyring_${CUDA_KEYRING_VERSION}_all.deb"
    apt-get update -q
    local series
    series=$(echo "$CUDA_PKG_VERSION" | awk -F. '{print $1"-"$2}')
    apt_install "cuda-nvcc-$series=$CUDA_PKG_VERSION" "cuda-cudart-dev-$series" "cuda-nvtx-$series"
    ln -sfn "/usr/local/cuda-${series/-/.}" /usr/local/cuda
    efa_install
  fi
  log "dependencies: scripts/install-deps.sh (build packages, torch $TORCH_VERSION into $prefix/venv)"
  grep -q "^TORCH_VERSION=${TORCH_VERSION}\$" "$src/scripts/install-deps.sh"  # the wheel the tests ran with
  SHARDTRAIN_DEPS=build SHARDTRAIN_VENV=$prefix/venv "$src/scripts/install-deps.sh"
  if [ "$variant" = cuda ]; then
    local nccl_home
    nccl_home=$("$prefix/venv/bin/python" -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')
    # aws-ofi-nccl against EFA's libfabric; NCCL dlopens it as libnccl-net.so.
    curl -fsSL "https://github.com/aws/aws-ofi-nccl/releases/download/v${AWS_OFI_NCCL_VERSION}/aws-ofi-nccl-${AWS_OFI_NCCL_VERSION}.tar.gz" | tar -xz -C /tmp
    (cd "/tmp/aws-ofi-nccl-${AWS_OFI_NCCL_VERSION}" && ./configure --prefix=/opt/aws-ofi-nccl --with-libfabric=/opt/amazon/efa \
       --with-cuda=/usr/local/cuda --enable-platform-aws --disable-tests && make -j"$(nproc)" && make install)
    rm -rf "/tmp/aws-ofi-nccl-${AWS_OFI_NCCL_VERSION}"
    # NCCL is the torch wheel's, so one libnccl.so.2 is loaded.
    cuda_env=(PATH=/usr/local/cuda/bin:$PATH NCCL_HOME=$nccl_home TORCH_CUDA_ARCH_LIST="8.0;9.0")
  fi
  log "build: scripts/build.sh (BUILD_TARGET=shardtrain)"
  env "${cuda_env[@]}" CCACHE_DIR=/root/.cache/ccache BUILD_DIR=/src/build BUILD_TARGET=shardtrain \
    "$src/scripts/build.sh" -DSHARDTRAIN_PYTHON="$prefix/venv/bin/python" -DSHARDTRAIN_BUILD_TESTS=OFF \
    -DSHARDTRAIN_GIT_COMMIT="${SHARDTRAIN_COMMIT:-unknown}"
  stage
}

# The image's tree: the binary, what users run beside it, and the Debian packages that own the
# libraries it links (the final stage installs those and nothing else).
stage() {
  mkdir -p "$prefix/bin" "$prefix/share" "$prefix/scripts" "$prefix/data"
  install -m 755 -s /src/build/src/shardtrain "$prefix/bin/shardtrain"
  cp -a "$src/configs" "$src/launch" "$src/slurm" "$src/containers" "$src/README.md" "$prefix/"
  cp -a "$src/data/demo" "$prefix/data/"
  cp -a "$src/scripts/demo.sh" "$prefix/scripts/"
  local libs
  libs=$(ldd "$prefix/bin/shardtrain" | awk '$3 ~ /^\// {print $3}' | grep -v "^$prefix/")
  # dpkg -S names the package of each library (by its resolved path on merged-/usr systems too).
  { for l in $libs; do dpkg -S "$l" 2> /dev/null || dpkg -S "$(readlink -f "$l")"; done; } \
    | cut -d: -f1 | sort -u > "$prefix/share/runtime-packages"
  log "run-time packages: $(tr '\n' ' ' < "$prefix/share/runtime-packages")"
  keep_torch
  echo "${SHARDTRAIN_COMMIT:-unknown}" > "$prefix/share/commit"  # build.sh passes it: the build context has no .git
}

# Of the venv, the image keeps what the binary loads, at the same paths (its RUNPATH names them):
# the libraries ldd resolves there, or, when it links the CUDA half, torch/lib and NVIDIA's
# wheels whole (they dlopen each other). No Python is needed to run the binary.
keep_torch() {
  local site keep=() k
  site=$(echo "$prefix"/venv/lib/python3*/site-packages)
  "$prefix/venv/bin/python" -c 'import torch; print(torch.__version__)' > "$prefix/share/torch-version"
  if ldd "$prefix/bin/shardtrain" | grep -q libtorch_cuda; then
    keep=(torch/lib nvidia)
  else
    mapfile -t keep < <(ldd "$prefix/bin/shardtrain" | awk '$3 ~ /^\// {print $3}' | xargs realpath -m \
      | awk -v s="$site/" 'index($0, s) == 1 {print substr($0, length(s) + 1)}')
  fi
  rm -rf /src/venv-keep
  for k in "${keep[@]}"; do
    mkdir -p "/src/venv-keep/$(dirname "$k")"
    cp -a "$site/$k" "/src/venv-keep/$k"
  done
  rm -rf "$prefix/venv"
  mkdir -p "$(dirname "$site")"
  mv /src/venv-keep "$site"
  log "torch $(cat "$prefix/share/torch-version"): kept ${keep[*]} ($(du -sh "$site" | cut -f1))"
}

# The MPI Operator mounts its SSH keys in sshAuthMountPath (/home/shardtrain/.ssh, read-only) and
# the workers run sshd as the user on port 2222, as the operator's own base image does.
ssh_for_mpi_operator() {
  sed -i 's/^#\?\s*StrictHostKeyChecking .*/    StrictHostKeyChecking no/' /etc/ssh/ssh_config
  printf '    UserKnownHostsFile /dev/null\n    Port 2222\n' >> /etc/ssh/ssh_config
  printf 'Port 2222\nPidFile /home/shardtrain/sshd.pid\nHostKey /home/shardtrain/.ssh/id_rsa\nStrictModes no\n' \
    > /home/shardtrain/.sshd_config
  chown shardtrain: /home/shardtrain/.sshd_config
  rm -f /etc/ssh/ssh_host_*  # every container would share them; the operator's key is the host key
  mkdir -p /run/sshd
}

runtime() {
  snapshot_sources
  apt-get update -q
  # openmpi-bin: mpirun in the image; openssh: the MPI Operator's launcher ssh-es to workers' sshd.
  local pkgs=(openmpi-bin openssh-client openssh-server ca-certificates)
  [ "$variant" = cuda ] && pkgs+=(curl)
  # shellcheck disable=SC2046
  apt_install "${pkgs[@]}" $(cat "$prefix/share/runtime-packages")
  if [ "$variant" = cuda ]; then
    efa_install
    # On the loader's own path too, so NCCL finds the plugin whatever LD_LIBRARY_PATH a launcher passes in.
    printf '%s\n' /opt/aws-ofi-nccl/lib /opt/amazon/efa/lib > /etc/ld.so.conf.d/aws-ofi-nccl.conf
  fi
  ldconfig
  id shardtrain > /dev/null 2>&1 || useradd --uid 1000 --create-home --shell /bin/bash shardtrain
  ssh_for_mpi_operator
  apt-get clean
  rm -rf /var/lib/apt/lists/*
  if ldd "$prefix/bin/shardtrain" | grep "not found"; then echo "build-image.sh: a library is missing" >&2; exit 1; fi
  "$prefix/bin/shardtrain" --version
}

# Apptainer builds in one stage: the build tools and sources go once the run-time set is marked.
slim() {
  local build_pkgs
  build_pkgs=$(bash -c "source <(sed -n '/^BUILD_PACKAGES=(/,/^)/p' $src/scripts/install-deps.sh); echo \${BUILD_PACKAGES[@]}")
  # shellcheck disable=SC2086
  apt-get purge -y -q $(echo $build_pkgs | tr ' ' '\n' | grep -vxE 'ca-certificates|openmpi-bin|python3')
  apt-get autoremove -y -q --purge
  rm -rf /src /root/.cache /var/lib/apt/lists/*
  if ldd "$prefix/bin/shardtrain" | grep "not found"; then echo "build-image.sh: slim removed a library" >&2; exit 1; fi
}

case "$mode" in
  build) build ;;
  runtime) runtime ;;
  slim) slim ;;
  *) echo "usage: build-image.sh build|runtime VARIANT, or slim" >&2; exit 2 ;;
esac
log done

#!/usr/bin/env bash
# Builds the shardtrain image's contents; run as root inside the image build from the repository
# copy at /opt/shardtrain (Dockerfile RUN, Apptainer %post). Versions: containers/versions.env.
set -euxo pipefail
cd /opt/shardtrain
source containers/versions.env
export DEBIAN_FRONTEND=noninteractive

# Debian packages from one snapshot, so that a rebuild gets the same versions.
cat >/etc/apt/sources.list <<SRC
deb [check-valid-until=no] http://snapshot.debian.org/archive/debian/$DEBIAN_SNAPSHOT bookworm main
deb [check-valid-until=no] http://snapshot.debian.org/archive/debian-security/$DEBIAN_SNAPSHOT bookworm-security main
SRC
rm -f /etc/apt/sources.list.d/debian.sources
apt-get update -q
apt-get install -y -q --no-install-recommends curl ca-certificates gnupg autoconf automake libtool libhwloc-dev pciutils \
  openssh-server openssh-client  # MPI Operator workers run sshd; the launcher ssh-es in

# CUDA compiler and runtime headers (the runtime libraries come with the driver and the torch wheel).
curl -fsSLO "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_${CUDA_KEYRING_VERSION}_all.deb"
dpkg -i "cuda-keyring_${CUDA_KEYRING_VERSION}_all.deb" && rm "cuda-keyring_${CUDA_KEYRING_VERSION}_all.deb"
apt-get update -q
cuda_series=$(echo "$CUDA_PKG_VERSION" | awk -F. '{print $1"-"$2}')
apt-get install -y -q --no-install-recommends "cuda-nvcc-$cuda_series=$CUDA_PKG_VERSION" \
  "cuda-cudart-dev-$cuda_series" "cuda-nvtx-$cuda_series"
ln -sfn "/usr/local/cuda-${cuda_series/-/.}" /usr/local/cuda

mkdir -p /run/sshd

# EFA: libfabric (/opt/amazon/efa) and rdma-core, without the kernel module (the host has it).
curl -fsSL "https://efa-installer.amazonaws.com/aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz" | tar -xz -C /tmp
(cd /tmp/aws-efa-installer && ./efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify)
rm -rf /tmp/aws-efa-installer

# shardtrain's own dependencies: Debian's Open MPI, parallel HDF5, Boost, ... and torch in .venv.
grep -q "^TORCH_VERSION=${TORCH_VERSION}\$" scripts/install-deps.sh  # the wheel the tests were run with
scripts/install-deps.sh
nccl_home=$(.venv/bin/python -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')  # include/ and lib/

# aws-ofi-nccl against EFA's libfabric; NCCL dlopens it as libnccl-net.so.
curl -fsSL "https://github.com/aws/aws-ofi-nccl/releases/download/v${AWS_OFI_NCCL_VERSION}/aws-ofi-nccl-${AWS_OFI_NCCL_VERSION}.tar.gz" | tar -xz -C /tmp
(cd "/tmp/aws-ofi-nccl-${AWS_OFI_NCCL_VERSION}" && ./configure --prefix=/opt/aws-ofi-nccl --with-libfabric=/opt/amazon/efa \
   --with-cuda=/usr/local/cuda --enable-platform-aws --disable-tests && make -j"$(nproc)" && make install)
rm -rf "/tmp/aws-ofi-nccl-${AWS_OFI_NCCL_VERSION}"
# On the loader's own path too, so NCCL finds the plugin whatever LD_LIBRARY_PATH a launcher passes in.
printf '%s\n' /opt/aws-ofi-nccl/lib /opt/amazon/efa/lib >/etc/ld.so.conf.d/aws-ofi-nccl.conf

# shardtrain with the CUDA/NCCL path: NCCL is the torch wheel's, so one libnccl.so.2 is loaded.
PATH=/usr/local/cuda/bin:$PATH NCCL_HOME=$nccl_home TORCH_CUDA_ARCH_LIST="8.0;9.0" BUILD_TARGET=shardtrain scripts/build.sh
ln -sf /opt/shardtrain/build/src/shardtrain /usr/local/bin/shardtrain
echo "$nccl_home/lib" >/etc/ld.so.conf.d/nccl-wheel.conf && ldconfig
apt-get clean && rm -rf /var/lib/apt/lists/*

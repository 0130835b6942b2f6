#!/usr/bin/env bash
# Builds the portable bundle: scripts/bundle.sh run inside a Debian 11 (bullseye, glibc 2.31) root
# file system, so that the bundle's objects need no glibc newer than Debian 11's and it runs on
# Ubuntu 20.04/22.04, Amazon Linux 2023, Debian 11+, RHEL/Rocky 9 (docs/bundle.md). Idempotent:
# every step is skipped when its result is there, so a second run only rebuilds what changed.
#   scripts/bundle-portable.sh            (root: debootstrap, chroot, mount namespaces)
# Env: SHARDTRAIN_DEB11_ROOT   the Debian 11 root (default /var/tmp/shardtrain-deb11)
#      SHARDTRAIN_DEB_MIRROR   Debian mirror (default: the first one in this machine's apt sources)
#      SHARDTRAIN_TORCH_SITE   the site-packages holding torch 2.11 (default: <repo>/.venv's); it
#                              is bind-mounted read-only at /opt/torch-site in the root, so the
#                              wheel is not downloaded again
#      SHARDTRAIN_CUDA_HOME    a CUDA toolkit with NCCL (nvcc, nccl.h, libnccl.so) to compile the
#                              CUDA/NCCL code in with, as scripts/bundle.sh does on the build machine;
#                              bind-mounted read-only at /usr/local/cuda in the root. Default:
#                              /usr/local/cuda when it has bin/nvcc; "none" builds without CUDA
#      DIST_DIR (<repo>/dist), JOBS (nproc), NICE (19: the build runs under nice -n $NICE)
# Steps: debootstrap (minbase) -> apt sources + build packages -> CMake from PyPI in a venv ->
# nlohmann-json 3.11 headers -> copy of the working tree -> build (BUILD_TARGET=shardtrain) ->
# scripts/bundle.sh -> dist/. The log of each step is $root/var/log/shardtrain-*.log.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
root=${SHARDTRAIN_DEB11_ROOT:-/var/tmp/shardtrain-deb11}
dist=${DIST_DIR:-$repo/dist}
jobs=${JOBS:-$(nproc)}
nice_level=${NICE:-19}
suite=bullseye
CMAKE_VERSION=3.31.6                     # PyPI's cmake wheel (Debian 11's CMake 3.18 < 3.25)
# Debian 11 has nlohmann-json 3.9.1; the project needs 3.10+. It is header-only, so Debian 12's
# (architecture "all") is unpacked into /opt/nlohmann-json: nothing of it reaches the bundle.
NLOHMANN_DEB=pool/main/n/nlohmann-json3/nlohmann-json3-dev_3.11.2-2_all.deb
NLOHMANN_SHA256=ec57940def6b6186c30be0e0ee81d1e58f86d11a54a145b28686a1e3e4aae801
BUILD_PACKAGES=(g++ make ninja-build pkg-config patchelf binutils file ca-certificates
  python3 python3-venv
  openmpi-bin libopenmpi-dev libhdf5-openmpi-dev zlib1g-dev libhwloc-plugins  # bundle.sh packs hwloc_pci.so
  libboost-program-options-dev libfabric-dev libsentencepiece-dev libpcre2-dev libutf8proc-dev)
torch_site=${SHARDTRAIN_TORCH_SITE:-$(ls -d "$repo"/.venv/lib/python3*/site-packages 2> /dev/null | head -1)}
cuda_home=${SHARDTRAIN_CUDA_HOME:-/usr/local/cuda}
[ "$cuda_home" != none ] && [ -x "$cuda_home/bin/nvcc" ] && cuda_home=$(readlink -f "$cuda_home") || cuda_home=none
[ "$(id -u)" = 0 ] || { echo "bundle-portable.sh: needs root (debootstrap, chroot, mounts)" >&2; exit 1; }
[ -f "$torch_site/torch/share/cmake/Torch/TorchConfig.cmake" ] \
  || { echo "bundle-portable.sh: no torch wheel in '$torch_site' (run scripts/install-deps.sh, or set SHARDTRAIN_TORCH_SITE)" >&2; exit 1; }
log() { echo "[bundle-portable $(date +%H:%M:%S)] $*"; }
mkdir -p "$(dirname "$root")"

source "$repo/scripts/debian-mirror.sh"  # mirror, security: the ones this machine's apt uses

# Runs a command in the root, in a private mount namespace: /proc, /sys, /dev and the torch wheel
# (read-only) are mounted for it and vanish with it.
ns_script='
root=$1 torch_site=$2 cuda_home=$3; shift 3
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
mkdir -p "$root/opt/torch-site"
mount --bind "$torch_site" "$root/opt/torch-site"
mount -o remount,bind,ro "$root/opt/torch-site"
if [ "$cuda_home" != none ]; then
  mkdir -p "$root/usr/local/cuda"
  mount --bind "$cuda_home" "$root/usr/local/cuda"
  mount -o remount,bind,ro "$root/usr/local/cuda"
fi
cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2> /dev/null || true
exec chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive \
  PATH=/opt/cmake-venv/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"'
in_root() { unshare --mount --propagation private /bin/bash -euo pipefail -c "$ns_script" in_root "$root" "$torch_site" "$cuda_home" "$@"; }
t0=$(date +%s)

# 1. The Debian 11 root.
if [ ! -f "$root/.debootstrap-done" ]; then
  command -v debootstrap > /dev/null || { echo "bundle-portable.sh: debootstrap is missing: apt-get install debootstrap" >&2; exit 1; }
  log "debootstrap $suite from $mirror into $root"
  rm -rf "$root"
  debootstrap --variant=minbase "$suite" "$root" "$mirror" > "$root.debootstrap.log" 2>&1 \
    || { tail -30 "$root.debootstrap.log"; exit 1; }
  touch "$root/.debootstrap-done"
fi
mkdir -p "$root/var/log"

# 2. Apt sources (with Debian 11's security updates) and the build packages.
write_apt_sources "$root" "$suite"
missing=()
for p in "${BUILD_PACKAGES[@]}"; do
  chroot "$root" dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ] || [ ! -f "$root/.apt-upgraded" ]; then
  log "apt-get install ${missing[*]:-(upgrade only)}"
  in_root /bin/sh -c "apt-get update -q && apt-get -y -q dist-upgrade && apt-get install -y -q ${missing[*]:-}" \
    > "$root/var/log/shardtrain-apt.log" 2>&1 || { tail -30 "$root/var/log/shardtrain-apt.log"; exit 1; }
  touch "$root/.apt-upgraded"
fi

# The build machine's own CAs (/usr/local/share/ca-certificates: a site's TLS-inspecting proxy, ...)
# so that pip in the root reaches PyPI the way this machine does; pip uses the system bundle.
if ls /usr/local/share/ca-certificates/*.crt > /dev/null 2>&1; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  if ! cmp -s <(cat /usr/local/share/ca-certificates/*.crt) <(cat "$root"/usr/local/share/ca-certificates/*.crt 2> /dev/null); then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    in_root update-ca-certificates > /dev/null 2>&1
  fi
fi
printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' > "$root/etc/pip.conf"

# 3. CMake from PyPI, in a venv.
if [ "$(in_root /bin/sh -c 'cmake --version 2> /dev/null | head -1')" != "cmake version $CMAKE_VERSION" ]; then
  log "pip install cmake==$CMAKE_VERSION into /opt/cmake-venv"
  in_root /bin/sh -c "python3 -m venv /opt/cmake-venv && /opt/cmake-venv/bin/pip install -q --disable-pip-version-check cmake==$CMAKE_VERSION" \
    > "$root/var/log/shardtrain-cmake.log" 2>&1 || { tail -30 "$root/var/log/shardtrain-cmake.log"; exit 1; }
fi

# 4. nlohmann-json 3.11 (headers and CMake config) from Debian 12's package.
nl_dir=/opt/nlohmann-json/usr/share/cmake/nlohmann_json
if [ ! -f "$root$nl_dir/nlohmann_jsonConfig.cmake" ]; then
  log "nlohmann-json: $mirror/$NLOHMANN_DEB"
  deb=$root/var/cache/nlohmann-json3-dev.deb
  in_root /bin/sh -c "python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' $mirror/$NLOHMANN_DEB /var/cache/nlohmann-json3-dev.deb"
  echo "$NLOHMANN_SHA256  $deb" | sha256sum -c --quiet - || { echo "bundle-portable.sh: $deb: checksum mismatch" >&2; exit 1; }
  in_root dpkg-deb -x /var/cache/nlohmann-json3-dev.deb /opt/nlohmann-json
fi

# 5. A copy of the working tree (tracked and untracked, not ignored files), so that the build
#    does not write into it and sees one consistent state; mtimes are kept, so ninja rebuilds
#    only what changed since the last run.
log "copying the working tree to $root/src/shardtrain"
mkdir -p "$root/src/shardtrain"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard | xargs -0 -r sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' _ ) \
  | (cd "$repo" && tar --null -T - -cf -) | tar -C "$root/src/shardtrain" -xpf -

# 6. The build: only the binary, against Debian 11's libraries and the bind-mounted torch wheel.
log "building shardtrain (gcc $(chroot "$root" gcc -dumpversion), CUDA toolkit: $cuda_home, -j$jobs, nice $nice_level); log: $root/var/log/shardtrain-build.log"
mkdir -p "$root/build"
# (the compiler is named: check_language(CUDA) caches a NOTFOUND from a configure without it)
cuda_args=(-DSHARDTRAIN_ENABLE_CUDA=OFF)
[ "$cuda_home" = none ] || cuda_args=(-DSHARDTRAIN_ENABLE_CUDA=ON -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
tb=$(date +%s)
in_root /usr/bin/nice -n "$nice_level" /usr/bin/env BUILD_TARGET=shardtrain BUILD_DIR=/build/shardtrain JOBS="$jobs" \
  /src/shardtrain/scripts/build.sh -DSHARDTRAIN_BUILD_TESTS=OFF \
  -DCMAKE_PREFIX_PATH="/opt/torch-site/torch;/opt/nlohmann-json/usr" "${cuda_args[@]}" \
  > "$root/var/log/shardtrain-build.log" 2>&1 || { tail -40 "$root/var/log/shardtrain-build.log"; exit 1; }
log "build: $(( $(date +%s) - tb )) s"

# 7. The bundle, packed inside the root (its ldd, its libraries), then copied to dist/.
rm -rf "$root/dist" && mkdir -p "$root/dist"
in_root /usr/bin/env BUILD_DIR=/build/shardtrain DIST_DIR=/dist BUNDLE_SKIP_BUILD=1 \
  SHARDTRAIN_TORCH=/opt/torch-site/torch PYTHON=/usr/bin/python3 /src/shardtrain/scripts/bundle.sh \
  | tee "$root/var/log/shardtrain-bundle.log"
mkdir -p "$dist"
tarball=$(ls "$root"/dist/shardtrain-*-linux-x86_64.tar.gz)
cp "$tarball" "$dist/"
log "$dist/$(basename "$tarball"): $(stat -c %s "$tarball") bytes, $(( $(date +%s) - t0 )) s in all"

#!/usr/bin/env bash
# The local base image: a Debian 12 minbase root file system debootstrapped from the Debian mirror
# this machine's apt uses, imported into podman. For machines that reach Debian's mirror but no
# image registry; containers/build.sh --base local runs it when the image is missing.
# Usage: containers/base-local.sh [TAG]     (root; default tag from containers/versions.env)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$repo/containers/versions.env"
source "$repo/scripts/debian-mirror.sh"
tag=${1:-$LOCAL_BASE_IMAGE}
root=${SHARDTRAIN_BASE_ROOT:-/var/tmp/shardtrain-base-$DEBIAN_SUITE}
[ "$(id -u)" = 0 ] || { echo "base-local.sh: needs root (debootstrap)" >&2; exit 1; }
command -v debootstrap > /dev/null || { echo "base-local.sh: debootstrap is missing: apt-get install debootstrap" >&2; exit 1; }
rm -rf "$root"
echo "[base-local] debootstrap --variant=minbase $DEBIAN_SUITE from $mirror"
debootstrap --variant=minbase "$DEBIAN_SUITE" "$root" "$mirror" > "$root.log" 2>&1 || { tail -30 "$root.log"; exit 1; }
write_apt_sources "$root" "$DEBIAN_SUITE"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root/etc/resolv.conf" "$root/etc/hostname"
# One layer with no timestamps of this machine's clock in it beyond the files' own.
tar --numeric-owner -C "$root" -c . | podman import --change 'CMD ["/bin/bash"]' - "$tag" > /dev/null
rm -rf "$root" "$root.log"
echo "[base-local] $tag: $(podman image inspect --format '{{.Size}}' "$tag") bytes"

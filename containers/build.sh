#!/usr/bin/env bash
# Builds the shardtrain image with podman (or docker), the same way here and on a user's machine.
#   containers/build.sh [--base local|cuda] [--tag TAG] [--oci-archive FILE]
#     --base cuda (default): FROM versions.env's DEBIAN_IMAGE, with NVIDIA's CUDA repository, the
#                 EFA installer and aws-ofi-nccl: the image for AWS GPU clusters
#     --base local: FROM a Debian 12 minbase debootstrapped from this machine's Debian mirror
#                 (containers/base-local.sh, run when the image is missing); Debian's libfabric and
#                 Open MPI, no CUDA: for machines that reach no image registry, and for the tests
#     --oci-archive FILE: also `podman save --format oci-archive` the image, for
#                 `apptainer build shardtrain.sif oci-archive://FILE`
# Env: CONTAINER_ENGINE (podman, else docker). Prints the build time and the image size.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$repo/containers/versions.env"
base=cuda tag= archive=
while [ $# -gt 0 ]; do
  case "$1" in
    --base) base=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --oci-archive) archive=$2; shift 2 ;;
    -h|--help) sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown option '$1'; see containers/build.sh --help" >&2; exit 2 ;;
  esac
done
case "$base" in
  local) from=$LOCAL_BASE_IMAGE tag=${tag:-$LOCAL_IMAGE} ;;
  cuda) from=$DEBIAN_IMAGE tag=${tag:-$IMAGE} ;;
  *) echo "error: --base '$base' is not local or cuda" >&2; exit 2 ;;
esac
engine=${CONTAINER_ENGINE:-$(command -v podman > /dev/null && echo podman || echo docker)}
command -v "$engine" > /dev/null || { echo "error: neither podman nor docker is installed (apt-get install podman)" >&2; exit 2; }
run_opts=()
if [ "$engine" = podman ]; then
  # crun fails on some hybrid cgroup layouts; runc works everywhere podman does. Explicit limits:
  # the defaults podman derives from a root shell's can exceed what the kernel allows here.
  run_opts=(--runtime runc --ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
fi
if [ "$base" = local ] && ! "$engine" image exists "$from" 2> /dev/null; then
  "$repo/containers/base-local.sh" "$from"
fi

# The machine's network set-up reaches pip at build time only: its CA bundle as a read-only
# volume (podman; docker build has none and uses the image's CAs), its pip settings as build arguments.
net=()
ca=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
if [ "$engine" = podman ] && [ -f "$ca" ]; then net+=(--volume "$ca:/run/host-ca.crt:ro" --build-arg PIP_CERT=/run/host-ca.crt); fi
for v in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST PIP_DEFAULT_TIMEOUT; do
  [ -n "${!v:-}" ] && net+=(--build-arg "$v=${!v}")
done

commit=$(git -C "$repo" rev-parse HEAD 2> /dev/null || echo unknown)
start=$SECONDS
echo "[containers/build] $engine build $tag from $from (variant $base, commit ${commit:0:12})"
"$engine" build "${run_opts[@]}" "${net[@]}" -f "$repo/containers/Dockerfile" \
  --build-arg BASE="$from" --build-arg VARIANT="$base" --build-arg SHARDTRAIN_COMMIT="$commit" \
  --label org.opencontainers.image.revision="$commit" -t "$tag" "$repo"
secs=$((SECONDS - start))
size=$("$engine" image inspect --format '{{.Size}}' "$tag")
echo "[containers/build] $tag built in ${secs} s; image size $size bytes ($((size / 1048576)) MiB)"
if [ -n "$archive" ]; then
  rm -f "$archive"
  "$engine" save --format oci-archive -o "$archive" "$tag"
  echo "[containers/build] $archive: $(stat -c %s "$archive") bytes (apptainer build shardtrain.sif oci-archive://$archive)"
fi

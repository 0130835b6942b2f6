#!/usr/bin/env bash
# The portable bundle (scripts/bundle-portable.sh) on a bare Debian 11 (bullseye, glibc 2.31): a
# debootstrap --variant=minbase root with only python3 + python3-venv and a venv holding torch
# 2.11, none of the build dependencies (no Open MPI, HDF5, Boost, SentencePiece, libfabric, no
# compiler). In a chroot there: the bundle's RUNPATHs and launchers hold no absolute path, no
# bundled ELF needs a GLIBC_ version above $MAX_GLIBC, --version, the self-test (preflight, which
# test_bundle.sh runs as the bundle's own check), prepare on the demo data, and a 2-rank
# `bin/shardtrain -np 2 train --model tiny --steps 5` under the bundled mpirun, every run with
# LD_DEBUG=libs checked by check_loaded.py. A slow suite, run by hand (not in ctest):
#   tests/bundle/test_bundle_debian11.sh [TARBALL]     (root; default: the newest dist/ tarball)
# Exit 0 pass, 1 fail, 77 skip (not root, no debootstrap/unshare, or the mirror is unreachable).
# Env: SHARDTRAIN_DEB11_TEST_ROOT (/var/tmp/shardtrain-deb11-run: kept and reused; delete it to
#      start from scratch), SHARDTRAIN_DEB_MIRROR, SHARDTRAIN_TORCH_SITE (the host's site-packages
#      with torch 2.11, default <repo>/.venv's), MAX_GLIBC (2.31).
#
# torch 2.11 requires Python >= 3.10 and Debian 11's python3 is 3.9, so pip cannot install it there;
# the venv gets the host's torch wheel files (torch/, its dist-info, nvidia/) by read-only bind mounts
# into its site-packages: the same files pip would unpack. The launcher only locates torch with
# importlib.util.find_spec and reads torch/version.py; it never imports torch.
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
troot=${SHARDTRAIN_DEB11_TEST_ROOT:-/var/tmp/shardtrain-deb11-run}
max_glibc=${MAX_GLIBC:-2.31}
torch_site=${SHARDTRAIN_TORCH_SITE:-$(ls -d "$repo"/.venv/lib/python3*/site-packages 2> /dev/null | head -1)}
t0=$(date +%s)
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (debootstrap, chroot, mounts)"
command -v debootstrap > /dev/null || skip "debootstrap is not installed (apt-get install debootstrap)"
unshare --mount true 2> /dev/null || skip "no mount namespaces"
mirror=${SHARDTRAIN_DEB_MIRROR:-$(grep -hoE '^(URIs:[[:space:]]*|deb[[:space:]]+(\[[^]]*\][[:space:]]+)?)[a-z]+://[^[:space:]]+/debian/?([[:space:]]|$)' \
  /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2> /dev/null | grep -oE '[a-z]+://[^[:space:]]+' | head -1)}
mirror=${mirror:-http://deb.debian.org/debian}; mirror=${mirror%/}
if [ ! -f "$troot/.setup-done" ]; then
  python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=20)' "$mirror/dists/bullseye/Release" 2> /dev/null \
    || skip "the Debian mirror $mirror is unreachable"
fi
[ -f "$torch_site/torch/version.py" ] || { echo "FAIL: no torch in '$torch_site' (set SHARDTRAIN_TORCH_SITE)"; exit 1; }
torch_pyver=$(sed -n "s/^__version__ = '\(.*\)'.*/\1/p" "$torch_site/torch/version.py")

pass=0 failed=0 failures=()
ok() { pass=$((pass + 1)); echo "ok   - $1"; }
bad() { failed=$((failed + 1)); failures+=("$1"); echo "FAIL - $1"; [ -n "${2:-}" ] && printf '%s\n' "$2" | tail -25 | sed 's/^/       /'; }
finish() {
  echo "Debian 11 bundle test: $pass passed, $failed failed ($(( $(date +%s) - t0 )) s)"
  [ "$failed" = 0 ] || { printf '  failed: %s\n' "${failures[@]}"; exit 1; }
  exit 0
}

# The minimal Debian 11 root: minbase + python3 + python3-venv, and a venv.
venv_site=/opt/venv/lib/python3.9/site-packages
if [ ! -f "$troot/.setup-done" ]; then
  echo "setting up $troot (debootstrap --variant=minbase bullseye from $mirror)"
  rm -rf "$troot"; mkdir -p "$(dirname "$troot")"
  debootstrap --variant=minbase bullseye "$troot" "$mirror" > "$troot.debootstrap.log" 2>&1 \
    || { tail -20 "$troot.debootstrap.log"; echo "FAIL: debootstrap"; exit 1; }
  cp -L /etc/resolv.conf "$troot/etc/resolv.conf" 2> /dev/null || true
  printf 'deb %s bullseye main\ndeb %s bullseye-updates main\ndeb %s bullseye-security main\n' \
    "$mirror" "$mirror" "${mirror%/debian}/debian-security" > "$troot/etc/apt/sources.list"
  unshare --mount --propagation private sh -c 'mount -t proc proc "$1/proc" && exec chroot "$1" /usr/bin/env -i \
      PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive sh -c \
      "apt-get update -q && apt-get -y -q dist-upgrade && apt-get install -y -q --no-install-recommends python3 python3-venv && apt-get clean && python3 -m venv /opt/venv"' \
    _ "$troot" > "$troot.setup.log" 2>&1 || { tail -20 "$troot.setup.log"; echo "FAIL: setting up the root"; exit 1; }
  touch "$troot/.setup-done"
fi

tarball=${1:-$(ls -t "$repo"/dist/shardtrain-*-linux-x86_64.tar.gz 2> /dev/null | head -1)}
[ -f "$tarball" ] || { echo "FAIL: no bundle (run scripts/bundle-portable.sh first, or pass the tarball)"; exit 1; }
echo "bundle: $tarball ($(stat -c %s "$tarball") bytes); root: $troot"

# None of the build dependencies is in the root.
present=$(chroot "$troot" /bin/sh -c 'for c in gcc g++ cc c++ mpirun orterun h5cc cmake; do command -v $c; done;
  ls /usr/lib/x86_64-linux-gnu/ | grep -E "^lib(mpi|open-pal|open-rte|pmix|hwloc|event|hdf5|boost_program_options|sentencepiece|fabric|ibverbs|efa|gfortran)[._-]";
  dpkg-query -W -f "\${Package}\n" | grep -E "^(gcc|g\+\+|cpp)(-[0-9]+)?$|openmpi|hdf5|boost|sentencepiece|fabric|hwloc|pmix|libevent"' 2>&1)
[ -z "$present" ] && ok "the root has no compiler, Open MPI, HDF5, Boost, SentencePiece, libfabric" \
  || bad "build dependencies present in the root" "$present"
pyver=$(chroot "$troot" /usr/bin/python3 -c 'import platform; print(platform.python_version())')
glibc_root=$(chroot "$troot" /usr/bin/ldd --version | head -1 | grep -oE '[0-9]+\.[0-9]+$')
echo "root: Debian $(cat "$troot/etc/debian_version"), glibc $glibc_root, python $pyver; torch $torch_pyver from $torch_site"

# The bundle, unpacked fresh inside the root.
rm -rf "$troot/opt/bundle-test"; mkdir -p "$troot/opt/bundle-test/work"
cp "$tarball" "$troot/opt/bundle-test/"
chroot "$troot" tar -C /opt/bundle-test -xzf "/opt/bundle-test/$(basename "$tarball")" || { bad "unpack"; finish; }
name=$(basename "$tarball" .tar.gz)
broot=$troot/opt/bundle-test/$name
cp "$repo/tests/bundle/check_loaded.py" "$troot/opt/bundle-test/"
echo "MANIFEST: $(sed -n 1,2p "$broot/share/shardtrain/MANIFEST" | paste -sd';' -)"

# Every ELF: RUNPATH relative to $ORIGIN, no DT_RPATH; the launchers name no build-machine path.
elfs=() rp_bad=""
while IFS= read -r -d '' f; do
  head -c 4 "$f" | grep -q 'ELF' || continue
  elfs+=("$f")
  dyn=$(readelf -d "$f" 2> /dev/null)
  rp=$(printf '%s\n' "$dyn" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
  printf '%s\n' "$dyn" | grep -q '(RPATH)' && rp_bad+="${f#$broot/}: has DT_RPATH"$'\n'
  if printf '%s\n' "$dyn" | grep -q '(NEEDED)'; then  # a dynamic object: needs a $ORIGIN RUNPATH
    case "$rp" in '$ORIGIN'|'$ORIGIN/'*) ;; *) rp_bad+="${f#$broot/}: RUNPATH '$rp'"$'\n' ;; esac
  fi
  case ":$rp:" in *:/*) rp_bad+="${f#$broot/}: absolute RUNPATH entry in '$rp'"$'\n' ;; esac
done < <(find "$broot" -type f -print0)
[ -z "$rp_bad" ] && [ "${#elfs[@]}" -gt 20 ] && ok "${#elfs[@]} ELF files, every RUNPATH \$ORIGIN-relative, no DT_RPATH" \
  || bad "RUNPATHs (${#elfs[@]} ELF files)" "$rp_bad"
abs=$(grep -nE '/(work|var/tmp|build|src/shardtrain|opt/torch-site|home|root)/' "$broot/bin/shardtrain" "$broot/bin/mpirun" "$broot/libexec/env.sh" 2>&1)
[ -z "$abs" ] && ok "the launchers (bin/shardtrain, bin/mpirun, libexec/env.sh) name no absolute build path" \
  || bad "absolute paths in the launchers" "$abs"

# The newest GLIBC_ symbol version any bundled ELF needs, against MAX_GLIBC and the MANIFEST.
need=$(for f in "${elfs[@]}"; do objdump -T "$f" 2> /dev/null; done | grep -oE 'GLIBC_[0-9]+(\.[0-9]+)+' | sort -uV | tail -1)
need=${need#GLIBC_}
over228=$(for f in "${elfs[@]}"; do  # the objects that need more than torch's wheel (2.28), and what
  v=$(objdump -T "$f" 2> /dev/null | grep -oE 'GLIBC_2\.(29|[3-9][0-9])\)?[[:space:]]+[A-Za-z_0-9]+' | tr -d ')' | sed 's/GLIBC_//' | sort -uV | paste -sd, -)
  [ -z "$v" ] || echo "${f#$broot/} ($v)"
done | sed 's/  */ /g' | paste -sd';' -)
echo "newest GLIBC_ version needed: $need; torch's wheel needs 2.28; above 2.28: ${over228:-nothing}"
if [ -n "$need" ] && [ "$(printf '%s\n%s\n' "$need" "$max_glibc" | sort -V | tail -1)" = "$max_glibc" ]; then
  ok "every bundled ELF runs on glibc $max_glibc (needs $need)"
else
  bad "a bundled ELF needs GLIBC_$need, above $max_glibc" "$over228"
fi
grep -q "needs glibc >= $need\$" "$broot/share/shardtrain/MANIFEST" && ok "MANIFEST states glibc >= $need" \
  || bad "MANIFEST's glibc floor" "$(grep glibc "$broot/share/shardtrain/MANIFEST")"

# The venv's torch: the host wheel's files, read-only, where pip would put them.
mnt_script='
troot=$1 site=$2 vsite=$3; shift 3
mount -t proc proc "$troot/proc"; mount --rbind /dev "$troot/dev"; mount --rbind /sys "$troot/sys"
for d in torch nvidia $(cd "$site" && ls -d torch-*.dist-info); do
  [ -d "$site/$d" ] || continue
  mkdir -p "$troot$vsite/$d"; mount --bind "$site/$d" "$troot$vsite/$d"; mount -o remount,bind,ro "$troot$vsite/$d"
done
exec chroot "$troot" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PATH=/opt/venv/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
  OMPI_MCA_btl_vader_single_copy_mechanism=none /bin/bash -c "$@"'
in_root() { unshare --mount --propagation private /bin/bash -eu -c "$mnt_script" in_root "$troot" "$torch_site" "$venv_site" "$1"; }
run() {  # NAME SHELL-COMMAND: run in the chroot from the bundle's directory, LD_DEBUG=libs logged
  local name=$1 out rc ts; ts=$(date +%s)
  out=$(in_root "cd /opt/bundle-test/$name_dir && mkdir -p /opt/bundle-test/ld && LD_DEBUG=libs LD_DEBUG_OUTPUT=/opt/bundle-test/ld/$name $2" < /dev/null 2>&1); rc=$?
  printf '%s\n' "$out" > "$troot/opt/bundle-test/work/$name.log"
  last=$out
  [ "$rc" = 0 ] && ok "$name ($(( $(date +%s) - ts )) s): $(printf '%s\n' "$out" | grep -v '^$' | tail -1 | cut -c1-150)" \
    || bad "$name: exit $rc" "$out"
}
name_dir=$name
found=$(in_root "python3 -c 'import importlib.util as u; print(u.find_spec(\"torch\").submodule_search_locations[0])'" 2>&1)
[ "$found" = "$venv_site/torch" ] && ok "the venv's python3 ($pyver) finds torch $torch_pyver at $found" || bad "the venv's torch" "$found"

run version "bin/shardtrain --version"
run selftest "bin/shardtrain preflight --device cpu --max-bytes 1M"
run prepare "bin/shardtrain prepare --tokenizer data/demo/tokenizer.model --input data/demo/train.jsonl --output /opt/bundle-test/work/train.h5 --seq-len 64 --mode packing"
run train2 "bin/shardtrain -np 2 train --model tiny --data /opt/bundle-test/work/train.h5 --steps 5 --device cpu --log-every 1 --seed 3 --metrics-file /opt/bundle-test/work/m2.jsonl"
losses=$(python3 -c '
import json, math, sys
l = [json.loads(x)["loss"] for x in open(sys.argv[1]) if "\"loss\"" in x]
assert len(l) == 5 and all(math.isfinite(v) for v in l), l
print(", ".join("%.4f" % v for v in l))' "$troot/opt/bundle-test/work/m2.jsonl" 2>&1) \
  && ok "2 ranks, 5 steps, finite losses: $losses" || bad "the 2-rank losses" "$losses"
# SHARDTRAIN_TORCH instead of asking python3 (the interpreter it would ask does not exist).
run torch_env "SHARDTRAIN_TORCH=$venv_site/torch SHARDTRAIN_PYTHON=/nonexistent/python3 bin/shardtrain --version"

# Every object that the bundle's programs loaded came from the bundle, the torch wheel or glibc.
out=$(in_root "python3 /opt/bundle-test/check_loaded.py /opt/bundle-test/ld /opt/bundle-test/$name $venv_site" 2>&1) \
  && ok "LD_DEBUG: $out" || bad "objects loaded from outside the bundle" "$out"
finish

#!/usr/bin/env bash
# Sourced: sets `mirror` and `security` to the Debian mirror this machine's apt uses (deb822
# "URIs:" or one-line "deb URL suite"; SHARDTRAIN_DEB_MIRROR overrides it), and defines
# write_apt_sources for a bootstrapped root.
host_mirror() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    grep -hoE '^(URIs:[[:space:]]*|deb[[:space:]]+(\[[^]]*\][[:space:]]+)?)[a-z]+://[^[:space:]]+/debian/?([[:space:]]|$)' "$f" \
      | grep -oE '[a-z]+://[^[:space:]]+' | head -1
  done | head -1
}
mirror=${SHARDTRAIN_DEB_MIRROR:-$(host_mirror)}
mirror=${mirror:-http://deb.debian.org/debian}
mirror=${mirror%/}
security=${mirror%/debian}/debian-security

# ROOT's apt: SUITE, its updates and security updates from that mirror, no recommended packages.
write_apt_sources() {  # ROOT SUITE
  cat > "$1/etc/apt/sources.list" <<SRC
deb $mirror $2 main
deb $mirror $2-updates main
deb $security $2-security main
SRC
  echo 'APT::Install-Recommends "false";' > "$1/etc/apt/apt.conf.d/90shardtrain-norecommends"
}

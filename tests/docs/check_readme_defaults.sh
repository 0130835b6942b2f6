#!/usr/bin/env bash
# The README's configuration table is what `shardtrain train --help-defaults` prints: the defaults
# live in the configuration structs, and neither the README nor --help may drift from them.
#   tests/docs/check_readme_defaults.sh SHARDTRAIN README.md
set -euo pipefail
bin=$1 readme=$2
want=$(mktemp) have=$(mktemp)
trap 'rm -f "$want" "$have"' EXIT
"$bin" train --help-defaults > "$want"
sed -n '/^<!-- defaults:begin -->$/,/^<!-- defaults:end -->$/p' "$readme" | sed '1d;$d' > "$have"
[ -s "$have" ] || { echo "FAIL: $readme has no table between <!-- defaults:begin --> and <!-- defaults:end -->"; exit 1; }
if ! diff -u "$have" "$want"; then
  echo "FAIL: $readme's defaults table differs from 'shardtrain train --help-defaults' (- README, + code);"
  echo "      replace the table with the output of: shardtrain train --help-defaults"
  exit 1
fi
echo "PASS: $(grep -c '^| `--' "$want") defaults in $readme match the code"

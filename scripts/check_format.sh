#!/usr/bin/env bash
# The C++/CUDA style check: every tracked .h/.cpp/.cu/.cuh file is as .clang-format formats it
# (Debian 12's clang-format 14). --fix rewrites the files instead.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
fmt=$(command -v clang-format-14 || command -v clang-format || true)
[ -n "$fmt" ] || { echo "check_format: clang-format not found; run scripts/install-deps.sh" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh' 2>/dev/null || find include src tests bench -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh')
if [ "${1:-}" = --fix ]; then
  printf '%s\0' "${files[@]}" | xargs -0 -n 50 "$fmt" -i --style=file
  exit 0
fi
# One clang-format for many files (a start per file was most of the check's 10 s); it names each
# file that differs in a "FILE:LINE:COL: error:" line.
mapfile -t bad < <(printf '%s\0' "${files[@]}" | xargs -0 -n 100 "$fmt" --style=file --dry-run -Werror 2>&1 |
  sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error:.*/\1/p' | sort -u || true)
if [ ${#bad[@]} -gt 0 ]; then
  printf '%s\n' "${bad[@]}" | sed 's/^/check_format: not formatted: /'
  echo "check_format: ${#bad[@]} of ${#files[@]} files differ from .clang-format; run scripts/check_format.sh --fix" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"

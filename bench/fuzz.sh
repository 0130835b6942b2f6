#!/usr/bin/env bash
# Runs every libFuzzer target of tests/fuzz (or the ones named) on a copy of its committed corpus,
# each until --runs executions or --seconds, whichever comes first, and prints executions, exec/s
# and coverage (libFuzzer's cov: edges and ft: features). --record writes the table into
# docs/reliability.md's "## Fuzzing" section. A crash, leak or timeout fails the script and leaves
# the input in BUILD/fuzz-artifacts/; add it to tests/fuzz/corpus/<target>/ once the bug is fixed.
#
# usage: bench/fuzz.sh [--build DIR] [--runs N] [--seconds S] [--parallel P] [--record] [TARGET...]
# defaults: --build build-san (scripts/sanitize.sh makes it), --runs 1000000, --seconds 600, --parallel 1
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$repo/build-san runs=1000000 seconds=600 parallel=1 record=0 targets=()
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --parallel) parallel=$2; shift 2 ;;
    --record) record=1; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    -*) echo "bench/fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=($(cd "$repo/tests/fuzz/corpus" && ls))
source "$repo/tests/sanitize/env.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/shardtrain-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
rm -rf "$build/fuzz-artifacts" && mkdir -p "$build/fuzz-artifacts"  # this run's findings only

run_one() {  # target -> $work/<target>.log and .rc
  local t=$1 exe=$build/tests/fuzz/$1
  [ -x "$exe" ] || { echo "bench/fuzz.sh: $exe is not built (scripts/sanitize.sh builds it)" > "$work/$t.log"; echo 1 > "$work/$t.rc"; return; }
  mkdir -p "$work/corpus-$t"
  # The first directory receives new inputs; the committed seeds stay untouched. -timeout: one
  # input may take 10 s at most (a hang is a finding); -rss_limit_mb: so may 2 GiB of memory.
  # HDF5 1.10.8 (Debian 12) itself hangs or crashes on some damaged files (h5dump too; reproducers
  # in tests/fuzz/hdf5-defects/): the HDF5 targets run in fork mode, which keeps such an input and
  # goes on. Each kept input is judged afterwards by library_defect: HDF5's or a finding.
  local mode=()
  case $t in fuzz_token_file|fuzz_checkpoint_attrs) mode=(-fork=1 -ignore_timeouts=1 -ignore_crashes=1) ;; esac
  local rc=0
  "$exe" -runs="$runs" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "${mode[@]}" \
    -artifact_prefix="$build/fuzz-artifacts/$t-" "$work/corpus-$t" "$repo/tests/fuzz/corpus/$t" > "$work/$t.log" 2>&1 || rc=$?
  echo $rc > "$work/$t.rc"
}

# Each input that fork mode kept (a hang, crash, leak or allocation over -rss_limit_mb) is run
# again and judged by its report: HDF5's own defect when the innermost frame that is HDF5's or
# shardtrain's is inside libhdf5, and no memory the report names was allocated by (or lies in a
# stack frame of) shardtrain code; otherwise a finding in shardtrain.
# Prints "hdf5 KIND FILE", "ours KIND FILE", "alone KIND FILE" when it passes when run alone, or
# "rss oom FILE" when the process as a whole passed the RSS limit (fork mode ignores ooms).
judge() {
  local a=$1 t kind report top
  t=$(basename "$a" | sed 's/-\(crash\|timeout\|oom\|leak\)-.*//') kind=$(basename "$a" | sed 's/^fuzz_[a-z_]*-\([a-z]*\)-.*/\1/')
  report=$(timeout 60 "$build/tests/fuzz/$t" -timeout=10 -rss_limit_mb=2048 "$a" 2>&1 || true)
  top=$(grep -E '^ +#[0-9]+ ' <<<"$report" | grep -E "libhdf5| in shardtrain::|$repo/(src|tests)/" | head -1 || true)
  if [ "$kind" = oom ] && ! grep -q 'out-of-memory (malloc(' <<<"$report"; then
    echo "rss $kind $a"  # the process as a whole passed -rss_limit_mb: no one allocation to blame
  elif ! grep -qE '^ +#[0-9]+ ' <<<"$report"; then
    echo "alone $kind $a"  # fine when run by itself: it failed only after other inputs (HDF5's state)
  elif grep -q libhdf5 <<<"$top" && ! sed -n '/is located\|allocated by thread\|freed by thread/,$p' <<<"$report" | grep -q ' in shardtrain::'; then
    echo "hdf5 $kind $a"
  else
    echo "ours $kind $a"
  fi
}
export -f judge
export build repo

running=0
for t in "${targets[@]}"; do
  run_one "$t" &
  running=$((running + 1))
  if [ $running -ge "$parallel" ]; then wait -n || true; running=$((running - 1)); fi
done
wait

failed=0
table="| target | executions | exec/s | seconds | cov (edges) | ft (features) | corpus | result |
|---|---:|---:|---:|---:|---:|---:|---|"
for t in "${targets[@]}"; do
  log=$work/$t.log rc=$(cat "$work/$t.rc")
  final() { sed -n "s/^stat::$1: *//p" "$log" | tail -1; }
  last=$(grep -E '^#[0-9]+:?[[:space:]].*cov: ' "$log" | tail -1 || true)
  cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$last") ft=$(sed -n 's/.*ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.*corp: \([0-9]*\).*/\1/p' <<<"$last")
  execs=$(final number_of_executed_units) rate=$(final average_exec_per_sec) secs=$(sed -n 's/.*Done \([0-9]*\) runs in \([0-9]*\) second.*/\2/p' "$log" | tail -1)
  result=ok
  if grep -q 'oom/timeout/crash' <<<"$last"; then  # fork mode: "#N: cov: .. exec/s: R oom/timeout/crash: a/b/c time: Ts"
    execs=$(sed -n 's/^#\([0-9]*\):.*/\1/p' <<<"$last") rate=$(sed -n 's/.*exec\/s:* \([0-9]*\).*/\1/p' <<<"$last")
    secs=$(sed -n 's/.* time: \([0-9]*\)s.*/\1/p' <<<"$last")
    # libFuzzer's fork mode exits 70 when any job timed out, which -ignore_timeouts accepts.
    [ "$rc" != 70 ] || rc=0
  fi
  case $t in fuzz_token_file|fuzz_checkpoint_attrs)  # fork mode: judge every input it kept
    # find, not ls: no kept input is no error (ls's exit 2 under pipefail ended the script silently)
    verdicts=$(find "$build/fuzz-artifacts" -maxdepth 1 -name "$t-*" | xargs -r -P "$parallel" -I{} bash -c 'judge "$1"' _ {})
    count() { grep -c "^$1 $2 " <<<"$verdicts" || true; }
    hangs=$(count hdf5 timeout) crashes=$(count hdf5 crash) ooms=$(count hdf5 oom) alone=$(grep -c '^alone ' <<<"$verdicts" || true)
    rss=$(grep -c '^rss ' <<<"$verdicts" || true)
    [ $((hangs + crashes + ooms + alone + rss)) = 0 ] || result="ok; inside HDF5 1.10.8: $hangs hangs, $crashes crashes, $ooms \
allocations over 2 GiB; $alone failed only after other inputs and pass alone; $rss passed 2 GiB of RSS as a whole, which \
fork mode ignores (all kept in fuzz-artifacts/)"
    # Fork mode exits non-zero once any input failed (70 for timeouts, the crash's code otherwise):
    # with every kept input judged above, that code says nothing more.
    [ -z "$verdicts" ] || rc=0
    ours=$(sed -n 's/^ours [a-z]* //p' <<<"$verdicts")  # a whole-process RSS oom is not judged: fork mode ignores it
    if [ -n "$ours" ]; then
      rc=1
      echo "=== $t: these inputs fail in shardtrain's code, not inside HDF5:"
      for a in $ours; do echo "$a"; { "$build/tests/fuzz/$t" "$a" 2>&1 || true; } | tail -30; done
    fi ;;
  esac
  if [ "$rc" != 0 ]; then
    result="FAILED (exit $rc)"; failed=1
    echo "=== $t: exit $rc; the log's end:"; tail -40 "$log"
  fi
  table+=$'\n'"| $t | ${execs:-?} | ${rate:-?} | ${secs:-?} | ${cov:-?} | ${ft:-?} | ${corp:-?} | $result |"
done
echo "$table"

if [ $record = 1 ]; then
  doc=$repo/docs/reliability.md
  section="## Fuzzing

libFuzzer targets in \`tests/fuzz/\` (built by \`-DSHARDTRAIN_FUZZ=ON\` with clang, under ASan + UBSan):
\`fuzz_safetensors_header\` (\`parse_safetensors_header\`), \`fuzz_safetensors_index\`
(\`parse_safetensors_index\`), \`fuzz_model_config\` (\`model_from_hf_text\` then \`validate\`),
\`fuzz_prepare_records\` (JSONL or a JSON array in each \`--format\`, tokenized and cut into rows),
\`fuzz_options\` (every command's arguments and a \`--config\` file), \`fuzz_token_file\` (the token-file
reader on a damaged HDF5 file) and \`fuzz_checkpoint_attrs\` (\`ckpt::read_attrs\` on a damaged HDF5 file).
A shardtrain \`Error\` is the expected answer to bad input; any other exception, crash, sanitizer
report, leak, or input slower than 10 s is a finding. Seeds and the inputs of fixed findings are in
\`tests/fuzz/corpus/<target>/\`. CI (\`scripts/sanitize.sh\`) runs each target for 20 s on its corpus.

\`bench/fuzz.sh --runs $runs --seconds $seconds --parallel $parallel\` on $(date -u +%Y-%m-%d), $(nproc) cores ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)),
clang $(clang --version | sed -n 's/.*clang version \([0-9.]*\).*/\1/p' | head -1), ASan + UBSan + libFuzzer; each target stops at $runs executions or $seconds s.

$table
"
  python3 - "$doc" "$section" <<'PY'
import re, sys, pathlib
path, section = pathlib.Path(sys.argv[1]), sys.argv[2]
text = path.read_text() if path.exists() else "# Reliability\n"
pat = re.compile(r"^## Fuzzing\n.*?(?=^## |\Z)", re.S | re.M)
text = pat.sub(lambda m: section.rstrip("\n") + "\n\n", text) if pat.search(text) else text.rstrip("\n") + "\n\n" + section
path.write_text(text)
PY
  echo "recorded in $doc"
fi
exit $failed

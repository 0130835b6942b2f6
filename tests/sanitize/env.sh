# Sourced by scripts/sanitize.sh and bench/fuzz.sh: the runtime options of the ASan + UBSan build.
# Every finding aborts with a nonzero status; only the suppressions below are tolerated.
_san_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# allocator_may_return_null=1: an absurd request returns NULL as glibc's malloc does (HDF5 then
# reports an error, C++ throws bad_alloc) instead of ASan aborting inside an uninstrumented library.
export ASAN_OPTIONS="allocator_may_return_null=1:abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:${ASAN_OPTIONS_EXTRA:-}"
export LSAN_OPTIONS="suppressions=$_san_dir/lsan.supp:print_suppressions=0"
# For the MPI programs: Open MPI is built without frame pointers, and only the slow unwinder
# reaches the MPI_Init frame that lsan.supp matches (too slow for the fuzz targets' every malloc).
export SAN_MPI_LSAN_OPTIONS="$LSAN_OPTIONS:fast_unwind_on_malloc=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$_san_dir/ubsan.supp"
command -v llvm-symbolizer >/dev/null && export ASAN_SYMBOLIZER_PATH=$(command -v llvm-symbolizer)
# Ranks started by mpirun on this host inherit these variables.
unset _san_dir

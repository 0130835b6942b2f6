# The environment the tests run in, sourced by scripts/test.sh and scripts/planted_bugs.sh.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# How many tests ctest runs at once (JOBS, or the cores this process may use). Counted without
# OMP_NUM_THREADS, which nproc obeys: the export below would make it 1 and ctest serial.
test_jobs=${JOBS:-$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)}
# ctest runs $(nproc) tests at once and mpiruns of up to 6 ranks among them, so cores are always
# oversubscribed: ranks waiting in MPI yield the core instead of spinning on it (a 1-thread run
# beside a spinning 4-rank job took 33 s, 18 s beside a yielding one, 12 s alone), and a process
# takes 1 LibTorch thread unless its test asks for more (a 2-thread run with a core shared halts
# at every parallel region's barrier: 37 s against 20 s with 1 thread).
export OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1
# The transport Open MPI picks here anyway (ob1: no Omni-Path or EFA), named so it skips probing
# the cm/PSM ones: the PSM libraries calibrate a clock at load, 0.2 s of every rank's start.
export OMPI_MCA_pml=ob1
# A Python test that dies of a signal prints where (dpo_trl's TRL side once died of SIGSEGV under
# load, once in many runs, and left nothing to go on).
export PYTHONFAULTHANDLER=1
# Open MPI removes its session directory's top (TMPDIR/ompi.HOST.UID) when it is left empty at a
# job's end; ctest runs mpiruns side by side, and one starting then fails to make its directory
# there ("A call to mkdir was unable to create..."). A file kept in it keeps it.
ompi_top="${TMPDIR:-/tmp}/ompi.$(hostname -s).$(id -u)"
mkdir -p -m 700 "$ompi_top" && touch "$ompi_top/.keep"

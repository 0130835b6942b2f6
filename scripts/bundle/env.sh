# Sourced by the bundle's bin/shardtrain and bin/mpirun with $root set to the unpacked bundle:
# relocates Open MPI and PMIx there (their configured paths are Debian's /usr).
export OPAL_PREFIX=$root
export OPAL_SYSCONFDIR=$root/etc/openmpi
export PMIX_MCA_mca_base_component_path=$root/lib/pmix
export HWLOC_PLUGINS_PATH=$root/lib/hwloc  # not the system hwloc's plugins, built for another hwloc
export PATH=$root/bin:$PATH
# The caller's library path without the bundle's lib/: python3 and other system tools must keep
# loading the system's own copies of libssl, libz, ...
system_ld_path=$(printf '%s' "${LD_LIBRARY_PATH:-}" | tr ':' '\n' | grep -vxF -e "$root/lib" -e '' | paste -sd: - || true)
# AWS's libfabric (EFA installer) comes before the bundled one, so aws-ofi-nccl and shardtrain share it.
fabric_lib=${SHARDTRAIN_FABRIC_LIB:-/opt/amazon/efa/lib}
[ -e "$fabric_lib/libfabric.so.1" ] || fabric_lib=
bundle_ld_path=${fabric_lib:+$fabric_lib:}$root/lib${system_ld_path:+:$system_ld_path}
# No ssh or rsh (a container, a minimal image): Open MPI's rsh launcher aborts even on one node,
# and so does a singleton (its orted selects a launcher too). The isolated launcher starts ranks
# on this node only, which is all that can work without ssh. Not in a Slurm allocation (Open MPI
# uses Slurm's launcher there) nor when the caller chose a launcher or an rsh agent.
if [ -z "${OMPI_MCA_plm:-}${OMPI_MCA_plm_rsh_agent:-}${SLURM_JOB_ID:-}" ] \
   && ! command -v ssh > /dev/null 2>&1 && ! command -v rsh > /dev/null 2>&1; then
  export OMPI_MCA_plm=isolated
fi

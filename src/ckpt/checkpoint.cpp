#include "shardtrain/ckpt/checkpoint.h"

#include "shardtrain/ckpt/save_failure.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/file_sync.h"

namespace shardtrain::ckpt {

void write(const std::string& path, MPI_Comm comm, const Snapshot& snap,
           const StripeOptions& stripe) {
  write_file(path, comm, snap, stripe);
  MPI_CHECK(MPI_Barrier(comm));
}

void write_and_publish(const std::string& final_path, MPI_Comm comm, const Snapshot& snap,
                       const StripeOptions& stripe, int keep) {
  const std::string tmp = final_path + ".tmp";
  const int64_t need = tensor_bytes(snap);
  std::string error;
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  check_space(comm, final_path, need);
  try {
    write_file(tmp, comm, snap, stripe);
    if (rank == 0) runtime::sync_file(tmp);  // a file system may report a full disk only now
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_save(comm, error, tmp, final_path, need);  // every rank throws alike, or none does
  if (rank == 0) publish(tmp, final_path, keep);
  MPI_CHECK(MPI_Barrier(comm));  // nobody moves on before `latest` names the new file
}

void save(const std::string& final_path, const StateRegistry& reg, const StripeOptions& stripe,
          int keep) {
  write_and_publish(final_path, reg.ranks().world, reg.snapshot(/*copy=*/false), stripe, keep);
}

void load(const std::string& path, StateRegistry& reg) { read_file(path, reg); }

}  // namespace shardtrain::ckpt

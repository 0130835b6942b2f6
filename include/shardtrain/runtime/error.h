// One place for error checks: every *_CHECK records file:line, rank, host and the library's
// own message, then throws. main() catches, prints one line and aborts the whole MPI job.
#pragma once
#include <stdexcept>
#include <string>

namespace shardtrain::runtime {

// Something went wrong at run time (I/O, a library call, a malformed file).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A bad value the user gave (option, config, file path): main exits with code 2.
class UsageError : public Error {
 public:
  using Error::Error;
};

// A UsageError that every rank throws alike, after agreeing on it: rank 0 alone prints it.
class AgreedUsageError : public UsageError {
 public:
  using UsageError::UsageError;
};

namespace detail {
// "rank 3 on host ip-10-0-0-1" once MpiEnv is up, "host H" before.
std::string identity();
void set_identity(int rank, const std::string& host);
[[noreturn]] void fail(const char* lib, const std::string& message, const char* expr,
                       const char* file, int line);
std::string mpi_error_string(int code);
std::string h5_error_string();  // walks the HDF5 error stack (defined in io: src/io/h5_error.cpp,
                                // the only module that links HDF5)
}  // namespace detail

}  // namespace shardtrain::runtime

#define ST_FAIL(lib, msg) ::shardtrain::runtime::detail::fail(lib, msg, "", __FILE__, __LINE__)

#define MPI_CHECK(call)                                                                            \
  do {                                                                                             \
    int st_rc_ = (call);                                                                           \
    if (st_rc_ != 0 /* MPI_SUCCESS */)                                                             \
      ::shardtrain::runtime::detail::fail("MPI",                                                   \
                                          ::shardtrain::runtime::detail::mpi_error_string(st_rc_), \
                                          #call, __FILE__, __LINE__);                              \
  } while (0)

// HDF5 signals failure with a negative herr_t/hid_t.
#define H5_CHECK(call)                                                                          \
  ([&]() {                                                                                      \
    auto st_v_ = (call);                                                                        \
    if (st_v_ < 0)                                                                              \
      ::shardtrain::runtime::detail::fail(                                                      \
          "HDF5", ::shardtrain::runtime::detail::h5_error_string(), #call, __FILE__, __LINE__); \
    return st_v_;                                                                               \
  }())

// Expanded only in CUDA/NCCL sources, which include cuda_runtime.h / nccl.h themselves.
#define CUDA_CHECK(call)                                                                      \
  do {                                                                                        \
    cudaError_t st_e_ = (call);                                                               \
    if (st_e_ != cudaSuccess)                                                                 \
      ::shardtrain::runtime::detail::fail("CUDA", cudaGetErrorString(st_e_), #call, __FILE__, \
                                          __LINE__);                                          \
  } while (0)

#define NCCL_CHECK(call)                                                                      \
  do {                                                                                        \
    ncclResult_t st_r_ = (call);                                                              \
    if (st_r_ != ncclSuccess)                                                                 \
      ::shardtrain::runtime::detail::fail("NCCL", ncclGetErrorString(st_r_), #call, __FILE__, \
                                          __LINE__);                                          \
  } while (0)

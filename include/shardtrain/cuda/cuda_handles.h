// Move-only owners of CUDA streams and events, and device queries. Built only when the CUDA
// toolkit is found (SHARDTRAIN_HAVE_CUDA).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace shardtrain::cuda {

class Stream {
 public:
  Stream();  // non-blocking: never serializes with the legacy default stream
  explicit Stream(int priority);
  Stream(Stream&& o) noexcept;
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();
  cudaStream_t get() const { return s_; }
  void synchronize() const;

 private:
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  explicit Event(bool timing = false);
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();
  cudaEvent_t get() const { return e_; }
  void record(cudaStream_t stream);
  void wait_on(cudaStream_t stream) const;  // stream waits for this event
  void synchronize() const;
  // Has the work before the record finished? A not-ready answer leaves cudaErrorNotReady as
  // the thread's last error, which the next kernel-launch check would report as a failure, so
  // it is cleared here (as PyTorch's CUDAEvent::query does); any other error throws.
  bool query() const;
  float elapsed_ms_since(const Event& start) const;

 private:
  cudaEvent_t e_ = nullptr;
};

struct DeviceInfo {
  std::string name;
  size_t total_memory = 0;
  int multiprocessors = 0;
  std::string pci_bus_id;    // e.g. 0000:53:00.0, to match nvidia-smi and DCGM
  int major = 0, minor = 0;  // compute capability, e.g. 9.0 (H100, H200)
};

// The stream LibTorch launches on now on this thread (its current stream; a CPU-only LibTorch
// launches nothing, and this is the per-thread default stream).
cudaStream_t current_stream();

// 0 when there is no driver or no device. Where there is one, LibTorch's CUDA half is loaded
// (load_torch_cuda) before this returns, so every path to a GPU passes through here first.
int device_count();
// Loads libtorch_cuda (LibTorch's CUDA kernels: a CUDA tensor needs it), once; throws when it
// cannot. Not linked: it and the libraries it needs would load in every process, GPU or not.
void load_torch_cuda();
DeviceInfo device_info(int device);
void set_device(int device);
int current_device();
void device_synchronize();

}  // namespace shardtrain::cuda

#include "shardtrain/cuda/cuda_handles.h"

#include <dlfcn.h>
#include <link.h>

#include <mutex>
#include <string>
#include <utility>

#include "shardtrain/runtime/error.h"
#ifdef SHARDTRAIN_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace shardtrain::cuda {

Stream::Stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
Stream::Stream(int priority) {
  CUDA_CHECK(cudaStreamCreateWithPriority(&s_, cudaStreamNonBlocking, priority));
}
Stream::Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (s_) cudaStreamDestroy(s_);
    s_ = std::exchange(o.s_, nullptr);
  }
  return *this;
}
Stream::~Stream() {
  if (s_) cudaStreamDestroy(s_);
}
void Stream::synchronize() const { CUDA_CHECK(cudaStreamSynchronize(s_)); }

Event::Event(bool timing) {
  CUDA_CHECK(cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming));
}
Event::Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (e_) cudaEventDestroy(e_);
    e_ = std::exchange(o.e_, nullptr);
  }
  return *this;
}
Event::~Event() {
  if (e_) cudaEventDestroy(e_);
}
void Event::record(cudaStream_t stream) { CUDA_CHECK(cudaEventRecord(e_, stream)); }
void Event::wait_on(cudaStream_t stream) const { CUDA_CHECK(cudaStreamWaitEvent(stream, e_, 0)); }
void Event::synchronize() const { CUDA_CHECK(cudaEventSynchronize(e_)); }
bool Event::query() const {
  const cudaError_t rc = cudaEventQuery(e_);
  if (rc == cudaSuccess) return true;
  if (rc == cudaErrorNotReady) {
    (void)cudaGetLastError();  // not an error: do not leave it for the next launch check
    return false;
  }
  CUDA_CHECK(rc);
  return false;
}
float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start.e_, e_));
  return ms;
}

cudaStream_t current_stream() {
#ifdef SHARDTRAIN_TORCH_CUDA
  return c10::cuda::getCurrentCUDAStream().stream();
#else
  return cudaStreamPerThread;
#endif
}

int device_count() {
  int n = 0;
  // No driver or no device is an answer (zero GPUs), not an error: CPU machines run everything
  // else.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  if (n > 0) load_torch_cuda();
  return n;
}

namespace {
// The directory libtorch_cpu.so was loaded from ("" if unknown): libtorch_cuda.so lies beside it.
std::string torch_lib_dir() {
  void* h = dlopen("libtorch_cpu.so", RTLD_NOW | RTLD_NOLOAD);
  link_map* m = nullptr;
  if (!h || dlinfo(h, RTLD_DI_LINKMAP, &m) != 0 || !m || !m->l_name) return "";
  const std::string path = m->l_name;
  return path.substr(0, path.rfind('/') + 1);
}
}  // namespace

void load_torch_cuda() {
#ifdef SHARDTRAIN_TORCH_CUDA
  static std::once_flag once;
  static std::string failed;
  std::call_once(once, [] {
    const int flags = RTLD_NOW | RTLD_GLOBAL;  // global: its kernels register with LibTorch's
    if (dlopen("libtorch_cuda.so", flags)) return;
    const std::string first = dlerror();
    const std::string beside = torch_lib_dir() + "libtorch_cuda.so";
    if (!dlopen(beside.c_str(), flags)) failed = first + "; " + dlerror();
  });
  if (!failed.empty())
    throw runtime::Error("a CUDA device is visible, but LibTorch's CUDA library did not load (" +
                         failed + "): is the torch package a CUDA build, with NVIDIA's wheels?");
#endif
}

DeviceInfo device_info(int device) {
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  char bus[32] = {};
  CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, device));
  return {p.name, p.totalGlobalMem, p.multiProcessorCount, bus, p.major, p.minor};
}

void device_synchronize() { CUDA_CHECK(cudaDeviceSynchronize()); }

int current_device() {
  int d = 0;
  CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int device) { CUDA_CHECK(cudaSetDevice(device)); }

}  // namespace shardtrain::cuda

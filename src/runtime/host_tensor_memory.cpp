#include "shardtrain/runtime/host_tensor_memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>

namespace shardtrain::runtime {
namespace {

std::atomic<int64_t> g_current{0}, g_peak{0};
std::atomic<bool> g_installed{false};

void note_alloc(int64_t n) {
  const int64_t now = g_current.fetch_add(n) + n;
  int64_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}

// Wraps the default allocator. The count rides in a header before the data, and the DataPtr's
// context is its data pointer, as LibTorch's own CPU allocator makes it: copy-on-write storage
// (lazy clones) requires that, and refuses a DataPtr whose context is anything else.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}
  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = base_->allocate(n + kHeader);
    const c10::Device device = inner.device();
    char* raw = static_cast<char*>(inner.get());
    auto* ctx = new Context{std::move(inner), static_cast<int64_t>(n)};
    *reinterpret_cast<Context**>(raw) = ctx;
    note_alloc(ctx->bytes);
    void* data = raw + kHeader;
    return {data, data, &release, device};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  static constexpr size_t kHeader = 64;  // keeps the data 64-byte aligned, as the base allocator's
  struct Context {
    c10::DataPtr inner;  // frees through the default allocator
    int64_t bytes;
  };
  static void release(void* data) {
    auto* ctx = *reinterpret_cast<Context**>(static_cast<char*>(data) - kHeader);
    g_current.fetch_sub(ctx->bytes);
    delete ctx;
  }
  c10::Allocator* base_;
};

}  // namespace

void track_host_tensor_memory() {
  if (g_installed.exchange(true)) return;
  static CountingAllocator counting(c10::GetDefaultCPUAllocator());
  c10::SetCPUAllocator(&counting, /*priority=*/1);  // above the default's 0
}

bool host_tensor_memory_tracked() { return g_installed.load(); }
int64_t host_tensor_bytes() { return g_current.load(); }
int64_t host_tensor_peak_bytes() { return g_peak.load(); }
void reset_host_tensor_peak() { g_peak.store(g_current.load()); }

}  // namespace shardtrain::runtime

#include "shardtrain/train/step_profiler.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unordered_map>

#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/logging.h"
#include "shardtrain/train/profile_summary.h"

namespace shardtrain::train {

namespace prof = torch::autograd::profiler;
namespace impl = torch::profiler::impl;

namespace {

// libkineto's ActivityType values (kineto/ActivityType.h), as KinetoEvent::activityType() gives
// them.
enum : uint8_t {
  kCpuOp = 0,
  kUserAnnotation = 1,
  kGpuUserAnnotation = 2,
  kGpuMemcpy = 3,
  kGpuMemset = 4,
  kKernel = 5,
  kCudaRuntime = 7
};

std::set<impl::ActivityType> activities(bool cuda) {
  std::set<impl::ActivityType> a{impl::ActivityType::CPU};
  if (cuda) a.insert(impl::ActivityType::CUDA);
  return a;
}

}  // namespace

StepProfiler::StepProfiler(int64_t step, std::string dir, int rank, bool cuda)
    : step_(step), dir_(std::move(dir)), rank_(rank), cuda_(cuda) {
  if (step_ <= 0) return;
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec)
    throw runtime::UsageError("--profile-dir: cannot create " + dir_ + " (" + ec.message() + ")");
  if (!cuda_)
    setenv("KINETO_LOG_LEVEL", "5", 0);  // no "gpuGetDeviceCount failed" line on a CPU run
  prof::prepareProfiler(impl::ProfilerConfig(impl::ProfilerState::KINETO),
                        activities(cuda_));  // CUPTI's setup, off the step
}

StepProfiler::~StepProfiler() {
  if (active_) prof::disableProfiler();  // a step that threw: no trace
}

void StepProfiler::begin(int64_t step) {
  if (step != step_) return;
  prof::enableProfiler(
      impl::ProfilerConfig(impl::ProfilerState::KINETO), activities(cuda_),
      {at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION, at::RecordScope::USER_SCOPE});
  active_ = true;
}

void StepProfiler::end(int64_t step) {
  if (step != step_ || !active_) return;
  active_ = false;
  const auto result = prof::disableProfiler();
  std::vector<ProfileEvent> events;
  std::vector<std::pair<int64_t, int64_t>> optim, device_optim;
  std::unordered_map<uint64_t, int64_t> launches;  // runtime call's correlation id -> its start
  for (const auto& e : result->events())
    if (e.activityType() == kCudaRuntime)
      launches[e.correlationId()] = static_cast<int64_t>(e.startNs());
  for (const auto& e : result->events()) {
    const auto start = static_cast<int64_t>(e.startNs()), end = static_cast<int64_t>(e.endNs());
    switch (e.activityType()) {
      case kUserAnnotation:
        if (e.name() == kOptimizerRange) optim.emplace_back(start, end);
        break;
      case kGpuUserAnnotation:
        if (e.name() == kOptimizerRange) device_optim.emplace_back(start, end);
        break;
      case kCpuOp:
        events.push_back({e.name(), start, end, -1, e.startThreadId(), false});
        break;
      case kKernel:
      case kGpuMemcpy:
      case kGpuMemset: {
        const auto l = launches.find(e.linkedCorrelationId());
        events.push_back({e.name(), start, end, l == launches.end() ? -1 : l->second, 0, true});
        break;
      }
      default:
        break;
    }
  }
  const std::string base = dir_ + "/", suffix = "-rank" + std::to_string(rank_);
  result->save(base + "trace" + suffix + ".json");
  const auto summary = summarize_profile(events, optim, device_optim, 10);
  const std::string text = format_profile(
      summary, step, std::string(cuda_ ? "CUDA" : "CPU") + ", rank " + std::to_string(rank_));
  std::ofstream(base + "profile" + suffix + ".md") << text;
  if (cuda_ && !summary.device)
    runtime::log::warn(
        "--profile-step: the profiler recorded no GPU kernels (is CUPTI, libcupti.so from the "
        "nvidia-cuda-cupti "
        "wheel, on the library path?); the summary is of host ops");
  runtime::log::info("profile of step " + std::to_string(step) + " (trace and summary in " + dir_ +
                     "):\n" + text);
}

}  // namespace shardtrain::train

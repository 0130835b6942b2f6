#include "shardtrain/fsdp/phase_clock.h"

#include "shardtrain/runtime/clock.h"
#ifdef SHARDTRAIN_HAVE_CUDA
#include "shardtrain/cuda/cuda_handles.h"
#endif

namespace shardtrain::fsdp {

#ifdef SHARDTRAIN_HAVE_CUDA
struct PhaseClock::Events {
  std::vector<cuda::Event> marks;      // [boundaries + 1], timing events
  std::vector<runtime::Phase> phases;  // the phase each interval closes
  // The compute stream's stalls on collectives inside each interval: exposed communication.
  std::vector<std::pair<runtime::Phase, std::function<double()>>> stalls;
  void record() {
    marks.emplace_back(/*timing=*/true);
    marks.back().record(cuda::current_stream());
  }
};
#else
struct PhaseClock::Events {};
#endif

PhaseClock::PhaseClock(const comm::ParallelDims& groups, bool on_cuda)
    : comms_(groups.all()), mark_(runtime::monotonic_seconds()), wait_mark_(wait_seconds()) {
#ifdef SHARDTRAIN_HAVE_CUDA
  if (on_cuda) {
    events_ = std::make_unique<Events>();
    events_->record();
    for (comm::Communicator* c : comms_)
      c->take_device_waits();  // before this clock: not its phases'
  }
#endif
  (void)on_cuda;
}

double PhaseClock::wait_seconds() const {
  double w = 0;
  for (const comm::Communicator* c : comms_) w += c->log().wait_seconds();
  return w;
}

PhaseClock::~PhaseClock() = default;

void PhaseClock::close(runtime::Phase p) {
  const double now = runtime::monotonic_seconds();
  const double wait = wait_seconds();
#ifdef SHARDTRAIN_HAVE_CUDA
  if (events_) {  // the GPU's time, read in finish(); collectives wait on the device, not the host
    events_->record();
    events_->phases.push_back(p);
    for (comm::Communicator* c : comms_)
      for (auto& stall : c->take_device_waits()) events_->stalls.emplace_back(p, std::move(stall));
    times_[runtime::Phase::kExposedComm] += wait - wait_mark_;
    mark_ = now;
    wait_mark_ = wait;
    return;
  }
#endif
  times_[p] += (now - mark_) - (wait - wait_mark_);
  times_[runtime::Phase::kExposedComm] += wait - wait_mark_;
  mark_ = now;
  wait_mark_ = wait;
}

runtime::PhaseTimes PhaseClock::finish() {
#ifdef SHARDTRAIN_HAVE_CUDA
  if (events_ && !events_->phases.empty()) {
    events_->marks.back().synchronize();
    for (size_t i = 0; i < events_->phases.size(); ++i)
      times_[events_->phases[i]] += events_->marks[i + 1].elapsed_ms_since(events_->marks[i]) / 1e3;
    for (const auto& [phase, stall] : events_->stalls) {  // the phase's GPU time held that wait
      const double s = stall();
      times_[phase] -= s;
      times_[runtime::Phase::kExposedComm] += s;
    }
    events_->phases.clear();
    events_->stalls.clear();
  }
#endif
  return times_;
}

}  // namespace shardtrain::fsdp

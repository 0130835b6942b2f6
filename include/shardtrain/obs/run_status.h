// How a training run ended, as the experiment trackers record it.
#pragma once

namespace shardtrain::obs {

enum class RunStatus {
  kFinished,
  kFailed,
  kKilled
};  // completed; an error or non-finite stop; a signal's stop

}  // namespace shardtrain::obs

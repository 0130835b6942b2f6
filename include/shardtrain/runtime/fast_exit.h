// Ends the process with `code` once everything it wrote is flushed, without running the static
// destructors: LibTorch's take about 0.1 CPU-s at every exit (its operator registry, torn down),
// and by the time a command returns, every file and communicator it used is already closed.
// Sanitized builds exit normally, so that LeakSanitizer's check at exit still runs.
#pragma once

namespace shardtrain::runtime {

[[noreturn]] void fast_exit(int code);

}  // namespace shardtrain::runtime

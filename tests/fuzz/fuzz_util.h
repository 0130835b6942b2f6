// Shared by the libFuzzer targets: what counts as a clean rejection, and scratch files.
#pragma once
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "shardtrain/runtime/error.h"

namespace shardtrain::fuzz {

// shardtrain's own errors are the expected answer to bad input; anything else escaping (a
// nlohmann or std exception, a crash, a sanitizer report) is a finding libFuzzer stops on.
template <typename F>
void expect_clean(F&& f) {
  try {
    f();
  } catch (const runtime::Error&) {
  }
}

// A per-process scratch file (in /dev/shm when it exists) that holds the input for readers that
// take a path.
inline std::string scratch_path(const char* ext) {
  const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  return std::string(dir) + "/shardtrain-fuzz-" + std::to_string(getpid()) + ext;
}

inline void write_file(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
}

}  // namespace shardtrain::fuzz

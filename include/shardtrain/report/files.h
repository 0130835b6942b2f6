// The file I/O of `shardtrain report` and `shardtrain scaling` (src/report/files.cpp).
#pragma once
#include <filesystem>
#include <string>

namespace shardtrain::report {

// A metrics file's whole text; runtime::UsageError naming the path when it cannot be opened.
std::string read_text(const std::string& path);

// Replaces the file whole (through PATH.tmp); runtime::StorageError naming the path on a full or
// read-only disk.
void write_text(const std::filesystem::path& path, const std::string& text);

// Creates --out-dir (and its parents) if missing and returns it; runtime::UsageError naming
// --out-dir when it is not a directory afterwards (e.g. a file is in the way).
std::filesystem::path make_out_dir(const std::string& out_dir);

}  // namespace shardtrain::report

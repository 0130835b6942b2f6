#include "shardtrain/report/files.h"

#include <fstream>
#include <sstream>

#include "shardtrain/runtime/atomic_write.h"
#include "shardtrain/runtime/error.h"

namespace fs = std::filesystem;

namespace shardtrain::report {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw runtime::UsageError(
        path + ": cannot open the file; pass a readable JSONL from train --metrics-file");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const fs::path& path, const std::string& text) {
  runtime::write_file_atomically(path.string(), text);  // whole or absent; a full disk is one line
}

fs::path make_out_dir(const std::string& out_dir) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (!fs::is_directory(out_dir))
    throw runtime::UsageError("--out-dir " + out_dir + ": cannot create the directory" +
                              (ec ? " (" + ec.message() + ")" : ""));
  return fs::path(out_dir);
}

}  // namespace shardtrain::report

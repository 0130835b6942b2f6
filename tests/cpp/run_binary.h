// Runs the shardtrain binary as a user would, capturing exit code and output.
#pragma once
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace testing_support {

struct Result {
  int code = -1;
  std::string out;  // stdout and stderr
};

// Any shell command, stdout and stderr together.
inline Result shell(const std::string& cmd) {
  Result r;
  FILE* p = popen(("(" + cmd + ") 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// The shardtrain binary with these arguments, after `prefix` (e.g. an mpirun command).
inline Result run(const std::string& args, const std::string& prefix = "") {
  return shell(prefix + std::string(SHARDTRAIN_BIN) + " " + args);
}

inline std::string tmp(const std::string& name) {
  std::filesystem::create_directories(SHARDTRAIN_TEST_TMP);
  return std::string(SHARDTRAIN_TEST_TMP) + "/" + name;
}

inline std::string source(const std::string& rel) { return std::string(SHARDTRAIN_SOURCE_DIR) + "/" + rel; }

inline std::string slurp(const std::string& path) {  // a whole text file; "" when missing
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

#ifdef SHARDTRAIN_PYTHON
// Pillow (tests/python/check_png.py) decodes the PNG and checks its size and that it is not blank.
inline Result check_png(const std::string& path, int w, int h) {
  return shell("'" SHARDTRAIN_PYTHON "' '" + source("tests/python/check_png.py") + "' '" + path + "' " +
               std::to_string(w) + " " + std::to_string(h));
}
#endif

// One JSON object per line, as --metrics-file writes them.
inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::vector<nlohmann::json> rows;
  while (std::getline(in, line)) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

}  // namespace testing_support

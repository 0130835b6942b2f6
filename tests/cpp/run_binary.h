// Runs the shardtrain binary as a user would, capturing exit code and output.
#pragma once
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_paths.h"

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

// The build's path, unless the environment names another: the bundle's GPU tests run away from
// the build (libexec/tests/run sets these; bench/gpu_suite.sh --parts tests).
inline std::string from_env(const char* name, const std::string& built) {
  const char* v = std::getenv(name);
  return v && *v ? v : built;
}
inline std::string shardtrain_bin() { return from_env("SHARDTRAIN_TEST_BIN", SHARDTRAIN_BIN); }
inline std::string test_work() { return from_env("SHARDTRAIN_TEST_WORK", SHARDTRAIN_TEST_TMP); }
// "mpirun ... -np ", to be followed by the rank count.
inline std::string mpiexec() { return from_env("SHARDTRAIN_TEST_MPIEXEC", SHARDTRAIN_MPIEXEC); }

// The shardtrain binary with these arguments, after `prefix` (e.g. an mpirun command).
inline Result run(const std::string& args, const std::string& prefix = "") {
  return shell(prefix + shardtrain_bin() + " " + args);
}

inline std::string tmp(const std::string& name) {
  std::filesystem::create_directories(test_work());
  return test_work() + "/" + name;
}

inline std::string source(const std::string& rel) {
  return from_env("SHARDTRAIN_TEST_SOURCES", SHARDTRAIN_SOURCE_DIR) + "/" + rel;
}

inline std::string slurp(const std::string& path) {  // a whole text file; "" when missing
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Pillow (tests/python/check_png.py) decodes the PNG and checks its size and that it is not blank.
inline Result check_png(const std::string& path, int w, int h) {
  return shell(std::string("'") + SHARDTRAIN_PYTHON + "' '" + source("tests/python/check_png.py") +
               "' '" + path + "' " + std::to_string(w) + " " + std::to_string(h));
}

// The first line of a command's output that is a JSON object (eval's result, before its
// human-readable line and after the log lines).
inline nlohmann::json first_json_line(const std::string& out) {
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("{", 0) == 0) return nlohmann::json::parse(line);
  throw std::runtime_error("no JSON line in: " + out);
}

// One JSON object per line, as --metrics-file writes them.
inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::vector<nlohmann::json> rows;
  while (std::getline(in, line)) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

}  // namespace testing_support

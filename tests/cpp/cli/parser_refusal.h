// A command line's refusal by its command's option parser, run in this process. main prints the
// parser's UsageError as its one line and exits 2 (src/cli/main.cpp): the launches that remain in
// the CLI tests check that path; the parsers' messages need no process of their own, each of which
// would spend a third of a second loading LibTorch.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "run_binary.h"
#include "shardtrain/cli/options.h"
#include "shardtrain/runtime/error.h"

namespace testing_support {

// The parser's message, or nullopt when the parser accepts the line (a refusal, if any, comes
// later, from the files or the ranks) or the command has no parser here.
inline std::optional<std::string> parser_refusal(const std::string& line) {
  using namespace shardtrain::cli;
  using Parse = std::function<void(const std::vector<std::string>&)>;
  static const std::map<std::string, Parse> parsers = {
      {"train", [](const auto& a) { parse_train(a, nullptr); }},
      {"eval", [](const auto& a) { parse_eval(a, nullptr); }},
      {"prepare", [](const auto& a) { parse_prepare(a, nullptr); }},
      {"generate", [](const auto& a) { parse_generate(a, nullptr); }},
      {"convert", [](const auto& a) { parse_convert(a, nullptr); }},
      {"inspect", [](const auto& a) { parse_inspect(a, nullptr); }},
      {"preflight", [](const auto& a) { parse_preflight(a, nullptr); }},
      {"plan", [](const auto& a) { parse_plan(a, nullptr); }},
  };
  std::istringstream words(line);  // the lines these tests pass have no quoted words
  std::vector<std::string> args;
  for (std::string w; words >> w;) args.push_back(w);
  if (args.empty() || !parsers.count(args[0])) return std::nullopt;
  try {
    parsers.at(args[0])({args.begin() + 1, args.end()});
  } catch (const shardtrain::runtime::UsageError& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

// Exit 2 with one line saying `text`: from the parser in this process where it refuses the line,
// else from the binary.
inline void expect_usage_error(const std::string& line, const std::string& text) {
  if (const auto said = parser_refusal(line)) {
    EXPECT_NE(said->find(text), std::string::npos)
        << line << "\nmessage should say '" << text << "':\n"
        << *said;
    EXPECT_EQ(said->find('\n'), std::string::npos) << "one line:\n" << *said;
    return;
  }
  const Result r = run(line);
  EXPECT_EQ(r.code, 2) << line << "\n" << r.out;
  EXPECT_NE(r.out.find(text), std::string::npos) << "message should say '" << text << "':\n"
                                                 << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << "one line:\n" << r.out;
}

}  // namespace testing_support

// `shardtrain tokenize`: {"text": ...} JSONL (a file or stdin) to one JSON array of token ids per
// line, to compare shardtrain's tokenizer with another implementation. One process, no MPI.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "shardtrain/cli/commands.h"
#include "shardtrain/cli/options.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::cli {

int cmd_tokenize(const std::vector<std::string>& args) {
  std::string help;
  const TokenizeOptions o = parse_tokenize(args, &help);
  if (o.common.wants_help()) {
    std::cout << help;
    return 0;
  }
  const data::Tokenizer tok(o.tokenizer);
  std::ifstream file;
  if (!o.input.empty()) {
    file.open(o.input, std::ios::binary);
    if (!file) throw runtime::UsageError("--input " + o.input + " cannot be opened");
  }
  std::istream& in = o.input.empty() ? std::cin : file;
  const std::string name = o.input.empty() ? "<stdin>" : o.input;
  std::string line;
  for (int64_t lineno = 1; std::getline(in, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;  // blank lines, as prepare skips them
    const std::string where = name + ":" + std::to_string(lineno);
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded())
      throw runtime::UsageError(where +
                                ": not JSON; each line must be an object {\"text\": \"...\"}");
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
      throw runtime::UsageError(
          where + ": no \"text\" string; each line must be an object {\"text\": \"...\"}");
    std::cout
        << nlohmann::json(tok.encode(j["text"].get<std::string>(), o.add_special, false)).dump()
        << '\n';
  }
  std::cout << std::flush;
  return 0;
}

}  // namespace shardtrain::cli

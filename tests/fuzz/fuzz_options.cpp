// The command-line and --config file parsers of every command. Input: the first byte picks the
// command; then arguments, one per line, up to a NUL byte; what follows the NUL is a config
// file passed as --config.
#include <functional>
#include <vector>

#include "fuzz_util.h"
#include "shardtrain/cli/options.h"

using namespace shardtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using Parse = std::function<void(const std::vector<std::string>&, std::string*)>;
  static const Parse kParsers[] = {
      [](const auto& a, auto* h) { cli::parse_train(a, h); },
      [](const auto& a, auto* h) { cli::parse_eval(a, h); },
      [](const auto& a, auto* h) { cli::parse_prepare(a, h); },
      [](const auto& a, auto* h) { cli::parse_generate(a, h); },
      [](const auto& a, auto* h) { cli::parse_convert(a, h); },
      [](const auto& a, auto* h) { cli::parse_inspect(a, h); },
      [](const auto& a, auto* h) { cli::parse_preflight(a, h); },
      [](const auto& a, auto* h) { cli::parse_scaling(a, h); },
      [](const auto& a, auto* h) { cli::parse_report(a, h); },
  };
  const Parse& parse = kParsers[data[0] % (sizeof kParsers / sizeof kParsers[0])];
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t nul = rest.find('\0');
  std::vector<std::string> args;
  std::string arg;
  for (char c : rest.substr(0, nul)) {
    if (c == '\n')
      args.push_back(arg), arg.clear();
    else
      arg += c;
  }
  if (!arg.empty()) args.push_back(arg);
  static const std::string config = fuzz::scratch_path(".conf");
  if (nul != std::string::npos) {
    const std::string text = rest.substr(nul + 1);
    fuzz::write_file(config, reinterpret_cast<const uint8_t*>(text.data()), text.size());
    args.push_back("--config"), args.push_back(config);
  }
  std::string help;
  fuzz::expect_clean([&] { parse(args, &help); });
  return 0;
}

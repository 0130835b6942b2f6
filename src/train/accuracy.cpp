#include "shardtrain/train/accuracy.h"

#include "shardtrain/runtime/error.h"

namespace shardtrain::train {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

AccuracyResult exact_match(const model::Decoder& model, const data::Tokenizer& tok,
                           const std::vector<data::Record>& records, int64_t max_new_tokens,
                           int64_t max_context, size_t max_examples) {
  AccuracyResult r;
  model::GenerateConfig g;
  g.max_new_tokens = max_new_tokens;
  g.stop_ids = tok.stop_ids();
  g.max_context = max_context;
  std::vector<std::vector<int32_t>> prompts;
  for (const data::Record& rec : records) prompts.push_back(tok.encode(rec.prompt));
  const auto done =
      model::generate(model, prompts, std::vector<uint64_t>(prompts.size(), 0), g);  // greedy
  for (size_t i = 0; i < records.size(); ++i) {
    const std::string got = trim(tok.decode(done[i].ids));
    const std::string want = trim(records[i].answer);
    r.correct += got == want;
    ++r.total;
    if (r.examples.size() < max_examples) r.examples.push_back("'" + want + "' -> '" + got + "'");
  }
  r.exact_match = r.total ? static_cast<double>(r.correct) / static_cast<double>(r.total) : 0.0;
  return r;
}

}  // namespace shardtrain::train

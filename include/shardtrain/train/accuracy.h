// Exact-match task accuracy: greedy-generate each answer from its prompt and compare the
// decoded text, whitespace-trimmed, with the reference answer.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "shardtrain/data/instruction.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/model/generate.h"

namespace shardtrain::train {

struct AccuracyResult {
  int64_t correct = 0, total = 0;
  double exact_match = 0;             // correct / total
  std::vector<std::string> examples;  // the first few "answer -> generated" pairs
};

std::string trim(const std::string& s);

// Greedy, every record's answer decoded with a KV cache (model/generate.h), batched.
AccuracyResult exact_match(const model::Decoder& model, const data::Tokenizer& tok,
                           const std::vector<data::Record>& records, int64_t max_new_tokens,
                           int64_t max_context, size_t max_examples = 3);

}  // namespace shardtrain::train

#include "shardtrain/data/data_identity.h"

#include "shardtrain/data/token_file.h"
#include "shardtrain/runtime/sha256.h"

namespace shardtrain::data {

std::string token_file_identity(const TokenFile& file) {
  const TokenFileMeta& m = file.meta();
  // One field per line, named: a field's value can never run into the next one's.
  std::string text;
  const auto add = [&text](const char* name, const std::string& value) {
    text += std::string(name) + "=" + value + "\n";
  };
  add("rows", std::to_string(m.rows));
  add("seq_len", std::to_string(m.seq_len));
  add("samples", std::to_string(m.samples));
  add("tokens", std::to_string(m.tokens));
  add("loss_tokens", std::to_string(m.loss_tokens));
  add("pad_id", std::to_string(m.pad_id));
  add("packing", m.packing);
  add("format", m.format);
  add("split", m.split);
  add("tokenizer_sha256", m.tokenizer_sha256);
  add("source_sha256", m.source_sha256);
  return runtime::sha256_hex(text.data(), text.size());
}

DataIdentity data_identity(const TokenFile& file, uint64_t seed) {
  return {seed, token_file_identity(file), file.rows()};
}

std::string describe_change(const DataIdentity& was, const DataIdentity& now) {
  std::string out;
  if (was.seed != now.seed)
    out = "--seed " + std::to_string(was.seed) + " (this run: " + std::to_string(now.seed) + ")";
  if (was.token_file != now.token_file)
    out += std::string(out.empty() ? "" : " and ") + "another token file (" +
           std::to_string(was.rows) + " rows, identity " + was.token_file.substr(0, 12) +
           "; this run's --data: " + std::to_string(now.rows) + " rows, identity " +
           now.token_file.substr(0, 12) + ")";
  return out;
}

}  // namespace shardtrain::data

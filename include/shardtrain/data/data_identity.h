// What a run trains on, as far as a resume must match it: the seed (the epochs' order, adapter
// dropout's masks) and the token file, named by a digest of its recorded provenance.
#pragma once
#include <cstdint>
#include <string>

namespace shardtrain::data {

class TokenFile;

struct DataIdentity {
  uint64_t seed = 0;
  std::string token_file;  // token_file_identity(): a SHA-256, hex
  int64_t rows = 0;
};

// SHA-256 of the file's shape, counts and provenance attributes (tokenizer, source, format,
// packing): a re-prepared file of other rows or from another source differs; the same
// preparation of the same source is the same data and gets the same identity.
std::string token_file_identity(const TokenFile& file);
DataIdentity data_identity(const TokenFile& file, uint64_t seed);

// "" when equal, else what changed, e.g. "--seed 7 (this run: 8)" and "a token file of 100 rows
// ...".
std::string describe_change(const DataIdentity& was, const DataIdentity& now);

}  // namespace shardtrain::data

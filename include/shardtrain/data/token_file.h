// The prepared-data file: /tokens [N, seq_len] int32 and /loss_mask [N, seq_len] uint8, packed
// files also /position_ids [N, seq_len] int32 (0 where a sample starts), with provenance in root
// attributes. Readers select only the rows they need (HDF5 hyperslabs). A file written by other
// tools may use any integer width (and h5py's bool for the mask); floats and the like are refused.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shardtrain/io/h5.h"
#include "shardtrain/model/batch.h"

namespace shardtrain::data {

// 2: packed files hold /position_ids [N, seq_len] int32, each token's position in its sample.
constexpr int64_t kTokenFileVersion = 2;

// A token file's rows in memory, as prepare makes them (make_rows) and write_token_file writes
// them.
struct Rows {
  int64_t rows = 0, seq_len = 0, tokens = 0, loss_tokens = 0;
  std::vector<int32_t> tokens_data;    // [rows, seq_len]
  std::vector<uint8_t> mask_data;      // [rows, seq_len]
  std::vector<int32_t> position_data;  // [rows, seq_len]: each token's position in its sample
};

struct TokenFileMeta {
  int64_t seq_len = 0, rows = 0, samples = 0, tokens = 0, loss_tokens = 0, max_token_id = 0;
  int64_t samples_read = 0, samples_skipped = 0, samples_truncated = 0;
  int64_t pad_id = 0, tokenizer_vocab_size = 0;
  std::string packing, format, split, skip_reasons_json;
  std::string tokenizer_sha256, source_file, source_sha256;
};

// Writes path via a temporary name and a rename; a failure leaves nothing behind. before_publish
// runs once the file is complete, before the rename: a failure there leaves nothing either.
void write_token_file(const std::string& path, const Rows& rows, TokenFileMeta meta,
                      const std::function<void()>& before_publish = {});

// The rows read together as one example: a preference file's pairs (row 2i chosen, 2i + 1
// rejected) are 2, so that shuffling, sharding and micro-batches keep them together; else 1.
int64_t rows_per_example(const TokenFileMeta& m);
inline constexpr const char* kPreferenceFormat = "preference";

class TokenFile {
 public:
  explicit TokenFile(
      const std::string& path);  // throws UsageError naming the file and what is wrong
  const TokenFileMeta& meta() const { return meta_; }
  int64_t rows() const { return meta_.rows; }
  int64_t seq_len() const { return meta_.seq_len; }
  bool preference() const { return rows_per_example(meta_) == 2; }
  const std::string& path() const { return path_; }
  // Thread-safe: holds the HDF5 lock while reading.
  model::Batch read(const std::vector<int64_t>& rows) const;
  // The first token outside [0, limit) in rows [begin, end), read in blocks of rows (row -1:
  // none), and the tokens in the loss (loss_mask != 0) of the rows read up to it: one pass over
  // both datasets. A read failure throws UsageError naming the file: its data is damaged.
  struct TokenAt {
    int64_t row = -1, column = -1, token = 0;
  };
  struct Scan {
    TokenAt outside;
    int64_t loss_tokens = 0;
  };
  Scan scan(int64_t limit, int64_t begin, int64_t end) const;
  TokenAt first_token_outside(int64_t limit, int64_t begin, int64_t end) const {
    return scan(limit, begin, end).outside;
  }

 private:
  std::string path_;
  TokenFileMeta meta_;
  io::h5::Handle file_, tokens_, mask_, positions_;  // positions_: packed files only
  bool wide_tokens_ =
      false;  // stored wider than int32: the scan reads int64, so no id is clamped unseen
};

}  // namespace shardtrain::data

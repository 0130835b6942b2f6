// A token file checked against the model before any compute, so that a bad file ends the run
// with one line naming it (exit 2), not hours later or as a library's stack.
#pragma once
#include <memory>
#include <string>

#include "shardtrain/data/token_file.h"
#include "shardtrain/model/config.h"
#include "shardtrain/runtime/mpi_env.h"

namespace shardtrain::data {

// Collective: opens a token file and checks it against the model: its datasets' dtypes and
// shapes, positions, the tokenizer's recorded vocabulary, and every token id in [0, vocab_size),
// scanned once with the rows split over the ranks (the file's max_token_id attribute is not
// trusted); names the row. The same pass counts the loss tokens: none is refused, under 1% of
// the tokens warns (rank 0). The line saying what was checked is logged, or left in *checked.
std::unique_ptr<data::TokenFile> open_token_file(const char* opt, const std::string& path,
                                                 const model::ModelConfig& model,
                                                 const runtime::MpiEnv& env,
                                                 std::string* checked = nullptr);

}  // namespace shardtrain::data

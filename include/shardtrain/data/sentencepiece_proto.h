// Edits of a serialized SentencePiece ModelProto, in protobuf's wire format (Debian ships no
// sentencepiece_model.pb.h to edit it through).
#pragma once
#include <string>

namespace shardtrain::data {

// The model with normalizer_spec.add_dummy_prefix false: it puts no "▁" before a text. Throws
// runtime::Error when the bytes are not a protobuf message.
std::string without_dummy_prefix(const std::string& model_proto);

}  // namespace shardtrain::data

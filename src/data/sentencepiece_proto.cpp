#include "shardtrain/data/sentencepiece_proto.h"

#include <cstdint>

#include "shardtrain/runtime/error.h"

namespace shardtrain::data {

namespace {

constexpr uint64_t kNormalizerSpec = 3;  // ModelProto.normalizer_spec
constexpr uint64_t kAddDummyPrefix = 3;  // NormalizerSpec.add_dummy_prefix (bool)
constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

uint64_t read_varint(const std::string& s, size_t* at) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*at >= s.size()) throw runtime::Error("SentencePiece model: a varint runs past the end");
    const auto b = static_cast<unsigned char>(s[(*at)++]);
    v |= static_cast<uint64_t>(b & 0x7F) << shift;
    if (!(b & 0x80)) return v;
  }
  throw runtime::Error("SentencePiece model: a varint longer than 10 bytes");
}

void write_varint(uint64_t v, std::string* out) {
  for (; v >= 0x80; v >>= 7) out->push_back(static_cast<char>((v & 0x7F) | 0x80));
  out->push_back(static_cast<char>(v));
}

// A field set once more at the end of a message wins over earlier ones (protobuf's merge rule).
std::string with_flag_off(const std::string& spec) {
  std::string out = spec;
  write_varint(kAddDummyPrefix << 3 | kVarint, &out);
  out.push_back('\0');
  return out;
}

}  // namespace

std::string without_dummy_prefix(const std::string& model) {
  std::string out;
  out.reserve(model.size() + 4);
  bool seen = false;
  for (size_t at = 0; at < model.size();) {
    const size_t field_start = at;
    const uint64_t tag = read_varint(model, &at);
    const int wire = static_cast<int>(tag & 7);
    size_t end = at;
    if (wire == kVarint) {
      read_varint(model, &end);
    } else if (wire == kFixed64 || wire == kFixed32) {
      end += wire == kFixed64 ? 8 : 4;
    } else if (wire == kLengthDelimited) {
      const uint64_t n = read_varint(model, &end);
      if (n > model.size() - end)
        throw runtime::Error("SentencePiece model: a field runs past the end");
      if (tag >> 3 == kNormalizerSpec) {
        const std::string spec = with_flag_off(model.substr(end, n));
        write_varint(tag, &out);
        write_varint(spec.size(), &out);
        out += spec;
        at = end + n;
        seen = true;
        continue;
      }
      end += n;
    } else {
      throw runtime::Error("SentencePiece model: wire type " + std::to_string(wire) +
                           " is not a protobuf field");
    }
    if (end > model.size()) throw runtime::Error("SentencePiece model: a field runs past the end");
    out.append(model, field_start, end - field_start);
    at = end;
  }
  if (!seen) {  // no normalizer_spec: its defaults, the flag off
    const std::string spec = with_flag_off("");
    write_varint(kNormalizerSpec << 3 | kLengthDelimited, &out);
    write_varint(spec.size(), &out);
    out += spec;
  }
  return out;
}

}  // namespace shardtrain::data

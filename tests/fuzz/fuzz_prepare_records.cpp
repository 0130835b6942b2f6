// prepare's input: JSONL or one JSON array of records, in each format, tokenized and cut into
// rows as `shardtrain prepare` does (chat records with the llama2 template). The first byte picks
// the format; the rest is the file.
#include <sstream>

#include "fuzz_util.h"
#include "shardtrain/data/chat_tokenize.h"
#include "shardtrain/data/prepare.h"

using namespace shardtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const data::Tokenizer tok(SHARDTRAIN_SOURCE_DIR "/data/demo/tokenizer.model");
  if (size == 0) return 0;
  static const data::ChatEncoder chat(tok, data::ChatTemplate::kLlama2);
  static const data::DataFormat kFormats[] = {data::DataFormat::kAuto, data::DataFormat::kAlpaca,
                                              data::DataFormat::kSamsum, data::DataFormat::kText,
                                              data::DataFormat::kChat};
  data::DataFormat format = kFormats[data[0] % 5];
  std::istringstream in(std::string(reinterpret_cast<const char*>(data) + 1, size - 1));
  fuzz::expect_clean([&] {
    std::vector<data::Sample> samples;
    int64_t last_line = 0;
    data::for_each_record(in, format, [&](int64_t line, data::ParsedLine& p) {
      if (line < last_line || line < 1) __builtin_trap();  // line numbers name the record in order
      last_line = line;
      if (p.ok != p.reason.empty()) __builtin_trap();  // a skip always says why
      if (p.ok && format == data::DataFormat::kChat) {
        data::ChatSample c = chat.encode(p.record.messages, false);
        int64_t dropped = 0;
        data::fit_chat(c, 64, &dropped);
        if (c.sample.ids.size() != c.sample.mask.size() || c.sample.ids.size() > 64)
          __builtin_trap();
        samples.push_back(std::move(c.sample));
      } else if (p.ok) {
        data::Sample s = data::tokenize_record(p.record, tok);
        if (s.ids.size() != s.mask.size()) __builtin_trap();
        if (s.ids.size() > 64) s.ids.resize(64), s.mask.resize(64);
        samples.push_back(std::move(s));
      }
      return samples.size() < 64;
    });
    for (bool packing : {true, false}) {
      const data::Rows r = data::make_rows(samples, 16, packing, tok.eos_id());
      if (static_cast<int64_t>(r.tokens_data.size()) != r.rows * 16) __builtin_trap();
    }
  });
  return 0;
}

#include "shardtrain/data/instruction.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "shardtrain/data/unicode_text.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::data {

DataFormat parse_format(const std::string& s) {
  if (const auto f = runtime::parse_enum(kDataFormatNames, s)) return *f;
  throw runtime::UsageError("--format must be " + runtime::enum_choices(kDataFormatNames) +
                            ", got '" + s + "'");
}

const char* format_name(DataFormat f) { return runtime::enum_name(kDataFormatNames, f); }

namespace {
// Empty or only spaces, tabs, CRs and LFs.
bool blank(std::string_view s) { return s.find_first_not_of(" \t\r\n") == std::string_view::npos; }
}  // namespace

std::string alpaca_prompt(const std::string& instruction, const std::string& input) {
  if (blank(input))
    return "Below is an instruction that describes a task. Write a response that appropriately "
           "completes the "
           "request.\n\n### Instruction:\n" +
           instruction + "\n\n### Response:";
  return "Below is an instruction that describes a task, paired with an input that provides "
         "further context. "
         "Write a response that appropriately completes the request.\n\n### Instruction:\n" +
         instruction + "\n\n### Input:\n" + input + "\n\n### Response:";
}

std::string samsum_prompt(const std::string& dialogue) {
  return "Summarize this dialog:\n" + dialogue + "\n---\nSummary:\n";
}

namespace {

// Reads a required text field; on failure fills the skip reason.
bool field(const nlohmann::json& j, const char* key, bool required_nonempty, std::string& out,
           ParsedLine& p) {
  auto it = j.find(key);
  if (it == j.end()) {
    p.reason = "missing field";
    p.detail = std::string("no \"") + key + "\"";
    return false;
  }
  if (!it->is_string()) {
    p.reason = "not a string";
    p.detail = std::string("\"") + key + "\" is " + it->type_name();
    return false;
  }
  out = it->get<std::string>();
  if (required_nonempty && blank(out)) {
    p.reason = "empty text";
    p.detail = std::string("\"") + key + "\" is empty";
    return false;
  }
  return true;
}

DataFormat detect(const nlohmann::json& j) {
  if (is_preference_record(j)) return DataFormat::kPreference;
  if (is_chat_record(j)) return DataFormat::kChat;
  if (j.contains("instruction") || j.contains("output")) return DataFormat::kAlpaca;
  if (j.contains("dialogue") || j.contains("summary")) return DataFormat::kSamsum;
  if (j.contains("text")) return DataFormat::kText;
  std::string keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys += (keys.empty() ? "" : ", ") + it.key();
  throw runtime::UsageError(
      "cannot detect the data format from the keys {" + keys +
      "}; expected alpaca (instruction/input/output), samsum (dialogue/summary), text, chat "
      "(messages/conversations) or preference (prompt/chosen/rejected); pass --format");
}

}  // namespace

ParsedLine parse_line(const std::string& line, DataFormat& format) {
  ParsedLine p;
  if (!valid_utf8(line)) {
    p.reason = "invalid UTF-8";
    return p;
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception&
               e) {  // out_of_range too: a number like 8e888888 overflows a double
    p.reason = "malformed JSON";
    p.detail = e.what();
    return p;
  }
  if (!j.is_object()) {
    p.reason = "malformed JSON";
    p.detail = std::string("a JSON ") + j.type_name() + ", not an object";
    return p;
  }
  if (format == DataFormat::kAuto) format = detect(j);
  Record& r = p.record;
  if (format == DataFormat::kAlpaca) {
    std::string instruction, input, output;
    if (!field(j, "instruction", true, instruction, p) || !field(j, "output", true, output, p))
      return p;
    if (j.contains("input") && !field(j, "input", false, input, p)) return p;
    r.prompt = alpaca_prompt(instruction, input);
    r.answer = output;
    r.joint = true;
  } else if (format == DataFormat::kChat) {
    ChatParse c = parse_chat(j);
    if (!c.ok) {
      p.reason = c.reason;
      p.detail = c.detail;
      p.fatal = c.fatal;
      return p;
    }
    r.messages = std::move(c.messages);
  } else if (format == DataFormat::kPreference) {
    if (!parse_preference(j, p)) return p;
  } else if (format == DataFormat::kSamsum) {
    std::string dialogue, summary;
    if (!field(j, "dialogue", true, dialogue, p) || !field(j, "summary", true, summary, p))
      return p;
    r.prompt = samsum_prompt(dialogue);
    r.answer = summary;
  } else {
    if (!field(j, "text", true, r.answer, p)) return p;
  }
  p.ok = true;
  return p;
}

namespace {

void for_each_line(std::istream& in, DataFormat& format,
                   const std::function<bool(int64_t, ParsedLine&)>& fn) {
  std::string line;
  for (int64_t lineno = 1; std::getline(in, line); ++lineno) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // Not blank(): a stray inner \r is left for parse_line to reject and count, not dropped.
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    ParsedLine p = parse_line(line, format);
    if (!fn(lineno, p)) return;
  }
}

bool json_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// One JSON array of records (Stanford Alpaca's alpaca_data.json), streamed: each top-level
// element's text is cut out by tracking strings and nesting, so memory holds one record at a time.
void for_each_element(std::istream& in, int64_t line, DataFormat& format,
                      const std::function<bool(int64_t, ParsedLine&)>& fn) {
  std::string elem;
  int64_t start_line = line;
  int depth = 0;
  bool in_string = false, escaped = false, closed = false;
  in.get();  // the opening '['
  char c;
  while (in.get(c)) {
    if (c == '\n') ++line;
    if (!in_string && depth <= 0 && (c == ',' || c == ']')) {
      if (!elem.empty() || c == ',') {  // "[a,,b]" gives an empty element, which parse_line rejects
        ParsedLine p = parse_line(elem, format);
        if (!fn(start_line, p)) return;
      }
      elem.clear();
      depth = 0;
      if (c == ']') {
        closed = true;
        break;
      }
      continue;
    }
    if (!in_string && json_space(c)) continue;  // insignificant outside strings, \r\n included
    if (elem.empty()) start_line = line;
    elem += c;
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  if (!closed) {  // a truncated file: its unfinished last record is counted as bad, not dropped
                  // silently
    ParsedLine p;
    p.reason = "truncated JSON array";
    p.detail = "no closing ]";
    fn(start_line, p);
  }
}

}  // namespace

void for_each_record(std::istream& in, DataFormat& format,
                     const std::function<bool(int64_t, ParsedLine&)>& fn) {
  // The first byte that is not space (after a UTF-8 BOM) chooses: '[' is one JSON array, else
  // JSONL, read from the start again so that its line numbers stay right.
  const auto start = in.tellg();
  char bom[3];
  if (!(in.read(bom, 3) && std::string(bom, 3) == "\xEF\xBB\xBF")) {
    in.clear();
    in.seekg(start);
  }
  int64_t line = 1;
  while (json_space(static_cast<char>(in.peek()))) line += in.get() == '\n';
  if (in.peek() == '[') return for_each_element(in, line, format, fn);
  in.clear();
  in.seekg(start);
  for_each_line(in, format, fn);
}

std::vector<Record> read_records(const std::string& path, DataFormat& format, int64_t limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw runtime::UsageError(path + " cannot be opened");
  std::vector<Record> out;
  for_each_record(in, format, [&](int64_t, ParsedLine& p) {
    if (p.ok) out.push_back(std::move(p.record));
    return limit <= 0 || static_cast<int64_t>(out.size()) < limit;
  });
  return out;
}

Sample tokenize_record(const Record& r, const Tokenizer& tok) {
  Sample s;
  if (r.prompt.empty()) {
    s.ids = tok.encode(r.answer, /*add_bos=*/true, /*add_eos=*/true);
    s.mask.assign(s.ids.size(), 1);
    return s;
  }
  if (r.joint) {
    s.ids = tok.encode(r.prompt + r.answer, /*add_bos=*/true, /*add_eos=*/true);
    const size_t n = std::min(s.ids.size(), tok.encode(r.prompt, /*add_bos=*/true).size());
    s.mask.assign(n, 0);
    s.mask.resize(s.ids.size(), 1);
    return s;
  }
  s.ids = tok.encode(r.prompt, /*add_bos=*/true);
  s.mask.assign(s.ids.size(), 0);
  const auto answer = tok.encode(r.answer, /*add_bos=*/false, /*add_eos=*/true);
  s.ids.insert(s.ids.end(), answer.begin(), answer.end());
  s.mask.resize(s.ids.size(), 1);
  return s;
}

}  // namespace shardtrain::data

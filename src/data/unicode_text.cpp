#include "shardtrain/data/unicode_text.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <cstdlib>

#include "shardtrain/runtime/error.h"

namespace shardtrain::data {

struct UnicodeRegex::Code {
  pcre2_code* re = nullptr;
  ~Code() { pcre2_code_free(re); }
};

UnicodeRegex::UnicodeRegex(const std::string& pattern, const std::string& where)
    : code_(std::make_unique<Code>()) {
  int err = 0;
  PCRE2_SIZE at = 0;
  // Oniguruma's Ruby syntax, which tokenizers uses: ^ and $ match at line breaks.
  const uint32_t flags = PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE;
  code_->re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), flags,
                            &err, &at, nullptr);
  if (!code_->re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw runtime::UsageError(where + ": PCRE2 cannot compile the pattern at offset " +
                              std::to_string(at) + ": " + reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile(code_->re,
                    PCRE2_JIT_COMPLETE);  // the interpreter serves when JIT is unavailable
}

UnicodeRegex::~UnicodeRegex() = default;
UnicodeRegex::UnicodeRegex(UnicodeRegex&&) noexcept = default;
UnicodeRegex& UnicodeRegex::operator=(UnicodeRegex&&) noexcept = default;

std::vector<std::pair<size_t, size_t>> UnicodeRegex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_->re, nullptr);
  if (!md) throw runtime::Error("PCRE2 could not allocate match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  size_t last_end = SIZE_MAX;
  uint32_t options = 0;
  while (pos <= text.size()) {
    const int rc = pcre2_match(code_->re, subject, text.size(), pos, options, md, nullptr);
    options = PCRE2_NO_UTF_CHECK;  // the whole subject was checked by the first call
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw runtime::UsageError(std::string("text cannot be tokenized: ") +
                                reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0];
    const size_t e = ov[1];
    const size_t step = b < text.size() ? utf8_char_len(static_cast<unsigned char>(text[b])) : 1;
    if (b == e && b == last_end) {  // an empty match right after the previous one: onig skips it
      pos = b + step;
      continue;
    }
    out.emplace_back(b, e);
    last_end = e;
    pos = b == e ? e + step : e;
  }
  pcre2_match_data_free(md);
  return out;
}

std::string escape_regex(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    const auto u = static_cast<unsigned char>(c);
    const bool plain = u >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                       (c >= 'A' && c <= 'Z') || c == '_';
    if (!plain) out += '\\';
    out += c;
  }
  return out;
}

std::string nfc(std::string_view utf8) {
  bool ascii = true;
  for (char c : utf8) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(utf8);  // composition never changes ASCII
  utf8proc_uint8_t* dst = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(utf8.data()),
                              static_cast<utf8proc_ssize_t>(utf8.size()), &dst,
                              static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0)
    throw runtime::UsageError(std::string("text cannot be normalized (NFC): ") +
                              utf8proc_errmsg(n));
  std::string out(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
  std::free(dst);
  return out;
}

size_t utf8_char_len(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xF0 && lead < 0xF8) return 4;
  if (lead >= 0xE0) return lead < 0xF0 ? 3 : 1;
  if (lead >= 0xC0) return 2;
  return 1;
}

namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 with *bad the length of its maximal invalid
// subpart.
size_t valid_at(std::string_view s, size_t i, size_t* bad) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return 1;
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range (Unicode table 3-7)
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    lo = b0 == 0xE0 ? 0xA0 : 0x80;
    hi = b0 == 0xED ? 0x9F : 0xBF;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    lo = b0 == 0xF0 ? 0x90 : 0x80;
    hi = b0 == 0xF4 ? 0x8F : 0xBF;
  }
  if (need == 0) {
    *bad = 1;
    return 0;
  }
  for (size_t k = 1; k < need; ++k) {
    if (i + k >= s.size()) {
      *bad = k;
      return 0;
    }
    const auto b = static_cast<unsigned char>(s[i + k]);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) {
      *bad = k;
      return 0;
    }
  }
  return need;
}

}  // namespace

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t bad = 0;
  for (size_t i = 0; i < bytes.size();) {
    const size_t n = valid_at(bytes, i, &bad);
    if (n > 0) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += bad;
    }
  }
  return out;
}

char32_t utf8_decode_at(std::string_view text, size_t at) {
  const auto b0 = static_cast<unsigned char>(text[at]);
  const size_t n = utf8_char_len(b0);
  if (n == 1) return b0;
  char32_t cp = b0 & (0x7F >> n);
  for (size_t k = 1; k < n && at + k < text.size(); ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(text[at + k]) & 0x3F);
  return cp;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_unicode_whitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

bool is_word_char(char32_t cp) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // truncated sequence
    for (int k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    // Overlong forms, UTF-16 surrogates and code points past U+10FFFF are not UTF-8.
    static const uint32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return false;
    i += n + 1;
  }
  return true;
}

size_t trailing_space_start(std::string_view text) {
  size_t at = text.size();
  while (at > 0) {
    size_t b = at - 1;
    while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
    if (!is_unicode_whitespace(utf8_decode_at(text, b))) break;
    at = b;
  }
  return at;
}

size_t leading_space_len(std::string_view text) {
  size_t at = 0;
  while (at < text.size() && is_unicode_whitespace(utf8_decode_at(text, at)))
    at += utf8_char_len(static_cast<unsigned char>(text[at]));
  return at;
}

}  // namespace shardtrain::data

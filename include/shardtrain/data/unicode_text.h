// The Unicode pieces a tokenizer.json needs: Oniguruma-style regexes through PCRE2, NFC through
// utf8proc, and UTF-8 checks and lossy decoding the way Rust's String::from_utf8_lossy does it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardtrain::data {

// A compiled pattern, UTF-8 with Unicode properties (\p{L}, \s, \w), as tokenizers' Onig regexes.
class UnicodeRegex {
 public:
  // Throws UsageError "<where>: <pcre2's message>" for a pattern PCRE2 cannot compile.
  UnicodeRegex(const std::string& pattern, const std::string& where);
  ~UnicodeRegex();
  UnicodeRegex(UnicodeRegex&&) noexcept;
  UnicodeRegex& operator=(UnicodeRegex&&) noexcept;

  // Every non-overlapping match [begin, end) in byte offsets, left to right, as onig's find_iter.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

 private:
  struct Code;
  std::unique_ptr<Code> code_;
};

// The pattern that matches `literal` exactly (a Split pattern given as {"String": ...}).
std::string escape_regex(std::string_view literal);

// Canonical composition (NFC) of valid UTF-8.
std::string nfc(std::string_view utf8);

// Invalid sequences become U+FFFD, one per maximal invalid subpart (Rust's from_utf8_lossy).
std::string utf8_lossy(std::string_view bytes);

// Byte length of the UTF-8 character starting with byte `lead` (1 for a stray byte).
size_t utf8_char_len(unsigned char lead);
// The code point starting at text[at] (text must be valid UTF-8 there).
char32_t utf8_decode_at(std::string_view text, size_t at);
void utf8_append(std::string& out, char32_t cp);

// Unicode White_Space (Rust's char::is_whitespace and regex \s).
bool is_unicode_whitespace(char32_t cp);
// Where the whitespace that ends text begins (Rust regex \s*$), and the length of the whitespace
// that starts it (^\s*): what an added token's lstrip and rstrip take.
size_t trailing_space_start(std::string_view text);
size_t leading_space_len(std::string_view text);
// Rust regex's \w: letters, marks, decimal digits, connector punctuation.
bool is_word_char(char32_t cp);

// Whether s is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool valid_utf8(std::string_view s);

}  // namespace shardtrain::data

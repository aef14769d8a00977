// UTF-8 validation of config text (see utf8.h).
#include "io/utf8.h"

#include "core/error.h"

namespace dit {

// The length of the valid UTF-8 sequence at s[i], or 0 (overlong forms, surrogates and code
// points past U+10FFFF are invalid).
std::size_t utf8_length(const std::string& s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned c = b(i);
  if (c < 0x80) return 1;
  const std::size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
  if (n == 0 || c > 0xF4 || i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  if (n == 3 && ((c == 0xE0 && b(i + 1) < 0xA0) || (c == 0xED && b(i + 1) >= 0xA0))) return 0;
  if (n == 4 && ((c == 0xF0 && b(i + 1) < 0x90) || (c == 0xF4 && b(i + 1) >= 0x90))) return 0;
  return n;
}

// TOML is UTF-8 text; toml11 3.7 reads past its buffer on some invalid sequences in strings
// (found by tests/fuzz/fuzz_config), so the bytes are checked before it sees them.
void check_utf8(const std::string& text, const std::string& origin) {
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_length(text, i);
    if (n == 0)
      DIT_FAIL(origin, ": line ", line, ", column ", column, ": byte 0x", std::hex,
               unsigned(static_cast<unsigned char>(text[i])), std::dec,
               " is not valid UTF-8 (a TOML file is UTF-8 text)");
    if (text[i] == '\n') ++line, column = 0;
    i += n;
    ++column;
  }
}

}  // namespace dit

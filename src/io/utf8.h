// Config text must be UTF-8 (TOML's own rule) before toml11 parses it: toml11 3.7 reads past its
// buffer on some invalid sequences inside strings (found by tests/fuzz/fuzz_config).
#pragma once

#include <string>

namespace dit {

// Throws "<origin>: line L, column C: byte 0xNN is not valid UTF-8 (...)" at the first invalid
// sequence (overlong forms, surrogates and code points past U+10FFFF included).
void check_utf8(const std::string& text, const std::string& origin);

// The length (1 to 4) of the valid UTF-8 sequence at s[i], or 0 where none starts (the JSON
// reader's check of its strings).
std::size_t utf8_length(const std::string& s, std::size_t i);

}  // namespace dit

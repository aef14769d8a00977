// A guard run before toml11 parses any text: toml11 parses nested arrays and inline tables by
// recursion, so a few thousand '[' exhaust the stack and crash the process (SIGSEGV, no message);
// a dotted key of 100000 parts ([a.a.a...] or a.a.a... = 1) nests tables as deep and crashes the
// same way.
// The guard scans the text as TOML lexes it (strings and comments skipped) and refuses nesting
// deeper than any dit_mp file needs, naming the origin and the line.
#pragma once

#include <string>

namespace dit {

// No dit_mp setting nests more than 2 levels; the bound leaves room and stays far below the depth
// that exhausts the stack.
inline constexpr int kMaxTomlNesting = 64;

// Throws dit::Error "<origin>:<line>: arrays and inline tables nest deeper than 64 levels ..." when
// '[' and '{' outside strings and comments open more than kMaxTomlNesting levels at once, and
// "<origin>:<line>: a dotted key nests deeper than 64 levels ..." when one key (of a table header,
// a key = value line or an inline table) has more than kMaxTomlNesting dots outside quotes.
void check_toml_nesting(const std::string& text, const std::string& origin);

}  // namespace dit

// The TOML nesting guard (see toml_guard.h): a small lexer that knows TOML's four string forms
// ("basic", 'literal', """multi-line basic""", '''multi-line literal''') and its comments.
#include "io/toml_guard.h"

#include "core/error.h"

namespace dit {

namespace {

// A long origin (a --set of 20000 '[') is shortened in the message.
std::string short_origin(const std::string& origin) {
  return origin.size() <= 80 ? origin : origin.substr(0, 72) + "... (" + std::to_string(origin.size()) + " chars)";
}

// The index just past the string that opens at text[at] (a quote), counting the newlines it spans.
// An unterminated string runs to the end (toml11 reports it).
std::size_t skip_string(const std::string& text, std::size_t at, int& line) {
  const char quote = text[at];
  const bool multi = text.compare(at, 3, std::string(3, quote)) == 0;
  const bool escapes = quote == '"';
  std::size_t i = at + (multi ? 3 : 1);
  while (i < text.size()) {
    const char c = text[i];
    if (c == '\n') {
      if (!multi) return i;  // a single-line string ends at the line's end (an error for toml11)
      ++line;
    }
    if (escapes && c == '\\') {
      i += 2;
      continue;
    }
    if (c == quote && (!multi || text.compare(i, 3, std::string(3, quote)) == 0)) {
      std::size_t end = i + (multi ? 3 : 1);
      while (multi && end < text.size() && text[end] == quote && end < i + 5) ++end;  // """a"""" is legal
      return end;
    }
    ++i;
  }
  return i;
}

}  // namespace

void check_toml_nesting(const std::string& text, const std::string& origin) {
  // open: the brackets open now, innermost last. A key is read at a line's start outside brackets,
  // in a table header, and after '{' or ',' in an inline table, up to its '='.
  std::string open;
  bool in_key = true;
  int key_dots = 0, line = 1;
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '"' || c == '\'') {
      i = skip_string(text, i, line);
      continue;
    }
    if (c == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
      continue;
    }
    if (c == '\n') ++line;
    if (c == '[' || c == '{') {
      open += c;
      if (int(open.size()) > kMaxTomlNesting)
        DIT_FAIL(short_origin(origin), ":", line, ": arrays and inline tables nest deeper than ", kMaxTomlNesting,
                 " levels; no dit_mp setting nests more than 2 (is the file damaged?)");
    } else if ((c == ']' || c == '}') && !open.empty()) {
      open.pop_back();
    }
    if (c == '.' && in_key && ++key_dots > kMaxTomlNesting)
      DIT_FAIL(short_origin(origin), ":", line, ": a dotted key nests deeper than ", kMaxTomlNesting,
               " levels; no dit_mp setting nests more than 2 (is the file damaged?)");
    const bool key_starts = (c == '\n' && open.empty()) || c == '{' || (c == ',' && !open.empty() && open.back() == '{');
    if (key_starts || c == '=') {
      in_key = key_starts;
      key_dots = 0;
    }
    ++i;
  }
}

}  // namespace dit

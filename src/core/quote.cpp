// The string escaper (see quote.h).
#include "core/quote.h"

#include <cstdio>

namespace dit {

std::string quote_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20 || ch == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "\"";
}

std::string shown_name(const std::string& s) {
  for (unsigned char ch : s)
    if (ch < 0x20 || ch == 0x7f || ch == '"' || ch == '\\') return quote_string(s);
  return s.empty() ? quote_string(s) : s;
}

}  // namespace dit

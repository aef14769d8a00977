// One string escaper for the text files dit_mp writes: a JSON string and a TOML basic string are
// written alike. Both take \" and \\ for a quote and a backslash and \uXXXX for a control character
// (JSON requires it below 0x20, TOML also for 0x7f; JSON accepts \u007f too), and both read other
// bytes (UTF-8) as they stand, so the same quoted text is valid in either.
#pragma once

#include <string>

namespace dit {

// `s` in double quotes, escaped as above: config.toml values, metrics and report JSON strings.
std::string quote_string(const std::string& s);

// A name read from a file (a tensor's, a key's) as a message shows it: as it stands when it holds
// no control character, quote or backslash, else quote_string's form, so that a NUL cannot cut the
// message short nor a newline forge a second line.
std::string shown_name(const std::string& s);

}  // namespace dit

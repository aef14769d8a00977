// A strict JSON reader for the small documents dit_mp reads from downloaded files (safetensors
// headers, diffusers' config.json) and from run folders (dit_mp report: metrics.jsonl's lines, the
// accounting, a trace). Values keep their text (numbers as written), so the reader
// decides nothing about ranges; nesting is bounded so a hostile file cannot exhaust the stack.
#pragma once

#include <string>
#include <vector>

namespace dit {

struct Json {
  enum class Kind { Object, Array, String, Number, Other } kind = Kind::Other;
  std::vector<std::string> keys;  // Object: member names, in file order
  std::vector<Json> items;        // Object: member values (keys[i]'s); Array: the items
  std::string text;               // String; Number as written; Other: true, false or null
  // An object's member, or nullptr; of a name given twice, the last (as Python's json.load keeps it).
  const Json* find(const std::string& key) const;
};

// Parses all of `text`; a failure throws "<context> is not valid JSON at byte N: <what><hint>".
Json parse_json(const std::string& text, const std::string& context, const std::string& hint, int max_depth);

}  // namespace dit

// The TOML nesting guard (io/toml_guard.h) and the run config readers it protects: deeply nested
// arrays and inline tables in a file or a --set are one error naming the origin and the line, where
// toml11 alone exhausted the stack (SIGSEGV); so are dotted keys of thousands of parts; brackets and
// dots in strings, comments and values do not count.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "io/config.h"
#include "io/toml_guard.h"

namespace dit {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string nested(int depth) { return std::string(std::size_t(depth), '[') + std::string(std::size_t(depth), ']'); }

TEST(TomlNesting, DeepArraysInAConfigFileAreOneError) {
  const std::string msg = error_of([] { RunConfig::from_toml("x = " + nested(10000) + "\n", "deep.toml"); });
  EXPECT_NE(msg.find("deep.toml:1: arrays and inline tables nest deeper than 64 levels"), std::string::npos) << msg;
  const std::string later =
      error_of([] { RunConfig::from_toml("[train]\nlr = 1e-3\n\nsteps = " + nested(100000) + "\n", "deep.toml"); });
  EXPECT_NE(later.find("deep.toml:4:"), std::string::npos) << later;
  std::string tables = "x = ";
  for (int i = 0; i < 5000; ++i) tables += "{a = ";
  EXPECT_NE(error_of([&] { RunConfig::from_toml(tables, "tables.toml"); }).find("tables.toml:1: arrays and inline"),
            std::string::npos);
}

TEST(TomlNesting, DeepArraysInASetAreOneError) {
  RunConfig c = RunConfig::demo();
  const std::string msg = error_of([&] { c.set("train.lr=" + nested(20000)); });
  EXPECT_NE(msg.find("--set train.lr=[[[["), std::string::npos) << msg;
  EXPECT_NE(msg.find("nest deeper than 64 levels"), std::string::npos) << msg;
  EXPECT_LT(msg.size(), 400u) << "the origin is shortened";
}

TEST(TomlNesting, StringsCommentsAndShallowNestingPass) {
  const std::string deep(5000, '[');
  check_toml_nesting("a = \"" + deep + "\"\nb = '" + deep + "'\n# " + deep + "\n", "strings.toml");
  check_toml_nesting("a = \"\"\"\n" + deep + "\n\"\"\"\nb = '''" + deep + "\n'''\n", "multi.toml");
  check_toml_nesting("a = \"\\\"" + deep + "\"\n", "escaped.toml");
  check_toml_nesting("[train]\nx = [[1, 2], [3]]\n[[runs]]\ny = {a = {b = [1]}}\n", "shallow.toml");
  check_toml_nesting(nested(kMaxTomlNesting), "edge.toml");
  EXPECT_NE(error_of([] { check_toml_nesting(nested(kMaxTomlNesting + 1), "edge.toml"); }).find("edge.toml:1:"),
            std::string::npos);
  // A quote inside a comment does not open a string that would hide what follows.
  EXPECT_NE(error_of([&] { check_toml_nesting("# it's\nx = " + nested(100), "c.toml"); }).find("c.toml:2:"),
            std::string::npos);
}

std::string dotted(int parts) {
  std::string key = "a";
  for (int i = 1; i < parts; ++i) key += ".a";
  return key;
}

TEST(TomlNesting, DeepDottedKeysAreOneError) {
  // 100000 parts crashed toml11 (SIGSEGV) in a table header and in a key = value line.
  const std::string header = error_of([] { RunConfig::from_toml("[model." + dotted(100000) + "]\nx = 1\n", "h.toml"); });
  EXPECT_NE(header.find("h.toml:1: a dotted key nests deeper than 64 levels"), std::string::npos) << header;
  const std::string key = error_of([] { RunConfig::from_toml("[train]\nlr = 1e-3\n" + dotted(100000) + " = 1\n", "k.toml"); });
  EXPECT_NE(key.find("k.toml:3: a dotted key nests deeper"), std::string::npos) << key;
  const std::string inl = error_of([] { check_toml_nesting("x = {b = 1, " + dotted(1000) + " = 1}\n", "i.toml"); });
  EXPECT_NE(inl.find("i.toml:1: a dotted key nests deeper"), std::string::npos) << inl;
  check_toml_nesting("[" + dotted(kMaxTomlNesting + 1) + "]\n", "edge.toml");  // 64 dots
  EXPECT_NE(error_of([] { check_toml_nesting(dotted(kMaxTomlNesting + 2) + " = 1\n", "edge.toml"); }).find("edge.toml:1:"),
            std::string::npos);
  // Dots in values (numbers, lists of numbers, strings) and in quoted keys are not key parts.
  std::string floats = "x = [";
  for (int i = 0; i < 500; ++i) floats += "1.5, ";
  check_toml_nesting(floats + "2.5]\ny = {a = 0.5, b = [0.1, 0.2], c.d = 1}\n\"" + dotted(500) + "\" = 1\n", "ok.toml");
  check_toml_nesting("z = [\n  1.5,\n  2.5,\n]\nw = 1.0e-3\n", "multi.toml");
}

}  // namespace
}  // namespace dit

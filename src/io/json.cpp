// The strict JSON reader of io/json.h: recursive descent with a depth bound, every failure one
// line naming the byte.
#include "io/json.h"

#include <cctype>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/error.h"
#include "io/utf8.h"

namespace dit {

namespace {

class JsonReader {
 public:
  JsonReader(const std::string& s, const std::string& context, const std::string& hint, int max_depth)
      : s_(s), context_(context), hint_(hint), max_depth_(max_depth) {}
  Json document() {
    Json v = value(0);
    skip_space();
    if (pos_ != s_.size()) fail("text after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    DIT_FAIL(context_, " is not valid JSON at byte ", pos_, ": ", what, hint_);
  }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }
  char peek() {
    skip_space();
    if (pos_ >= s_.size()) fail("the text ends early");
    return s_[pos_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  Json value(int depth) {
    if (depth > max_depth_) fail("nested deeper than " + std::to_string(max_depth_) + " levels");
    const char c = peek();
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') return Json{Json::Kind::String, {}, {}, string()};
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    for (const char* word : {"true", "false", "null"})
      if (s_.compare(pos_, std::strlen(word), word) == 0) {
        pos_ += std::strlen(word);
        return Json{Json::Kind::Other, {}, {}, word};
      }
    fail("unexpected character");
  }
  Json object(int depth) {
    Json o{Json::Kind::Object, {}, {}, {}};
    expect('{');
    if (peek() == '}') return ++pos_, o;
    for (;;) {
      if (peek() != '"') fail("expected a member name");
      o.keys.push_back(string());
      expect(':');
      o.items.push_back(value(depth + 1));
      if (peek() == ',') { ++pos_; continue; }
      expect('}');
      return o;
    }
  }
  Json array(int depth) {
    Json a{Json::Kind::Array, {}, {}, {}};
    expect('[');
    if (peek() == ']') return ++pos_, a;
    for (;;) {
      a.items.push_back(value(depth + 1));
      if (peek() == ',') { ++pos_; continue; }
      expect(']');
      return a;
    }
  }
  Json number() {
    const std::size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    while (pos_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '.' ||
                                s_[pos_] == 'e' || s_[pos_] == 'E' || s_[pos_] == '+' || s_[pos_] == '-'))
      ++pos_;
    return Json{Json::Kind::Number, {}, {}, s_.substr(start, pos_ - start)};
  }
  void append_utf8(std::string& out, unsigned cp) {
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
  unsigned hex4() {
    if (pos_ + 4 > s_.size()) fail("a \\u escape ends early");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = s_[pos_++];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= static_cast<unsigned>(h - '0');
      else if (h >= 'a' && h <= 'f') v |= static_cast<unsigned>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') v |= static_cast<unsigned>(h - 'A' + 10);
      else fail("a \\u escape with a non-hex digit");
    }
    return v;
  }
  std::string string() {
    ++pos_;  // the opening quote
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) fail("a string is not closed");
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("a control character inside a string");
      if (static_cast<unsigned char>(c) >= 0x80) {  // JSON text is UTF-8: a name's bytes are checked
        const std::size_t n = utf8_length(s_, pos_ - 1);
        if (n == 0) {
          --pos_;
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02x", static_cast<unsigned char>(c));
          fail(std::string("byte ") + hex + " inside a string is not valid UTF-8");
        }
        out.append(s_, pos_ - 1, n);
        pos_ += n - 1;
        continue;
      }
      if (c != '\\') { out += c; continue; }
      if (pos_ >= s_.size()) fail("an escape ends early");
      const char e = s_[pos_++];
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && s_.compare(pos_, 2, "\\u") == 0) {
            pos_ += 2;
            const unsigned lo = hex4();
            if (lo < 0xDC00 || lo >= 0xE000) fail("an unpaired surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: fail("an unknown escape");
      }
    }
  }

  const std::string& s_;
  const std::string& context_;
  const std::string& hint_;
  int max_depth_;
  std::size_t pos_ = 0;
};

}  // namespace

const Json* Json::find(const std::string& key) const {
  for (std::size_t i = keys.size(); i-- > 0;)
    if (keys[i] == key) return &items[i];
  return nullptr;
}

Json parse_json(const std::string& text, const std::string& context, const std::string& hint, int max_depth) {
  return JsonReader(text, context, hint, max_depth).document();
}

}  // namespace dit

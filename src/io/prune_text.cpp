// The block lists of `dit_mp prune` (see prune_text.h).
#include "io/prune_text.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.h"

namespace dit {

namespace {
// C(size, keep), or more than `most` (without enumerating the choices).
std::size_t choices(int size, int keep, std::size_t most) {
  double c = 1;
  for (int i = 1; i <= keep; ++i) c = c * (size - keep + i) / i;
  return c > double(most) ? most + 1 : static_cast<std::size_t>(std::llround(c));
}
}  // namespace

std::vector<int> parse_int_list(const std::string& text, const char* what) {
  std::vector<int> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty()) continue;
    std::size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    DIT_CHECK(used == item.size() && used > 0, what, ": '", item, "' is not an integer (expected e.g. 0,3,7)");
    out.push_back(v);
  }
  return out;
}

std::vector<int> parse_keep_text(const std::string& text, int teacher_depth, int depth) {
  std::vector<int> keep = parse_int_list(text, "--keep");
  DIT_CHECK(int(keep.size()) == depth, "--keep lists ", keep.size(), " block", keep.size() == 1 ? "" : "s",
            " but --depth is ", depth, ": give one teacher block per student block");
  std::sort(keep.begin(), keep.end());
  for (const int k : keep)
    DIT_CHECK(k >= 0 && k < teacher_depth, "--keep ", k, ": the teacher has ", teacher_depth,
              " blocks, so expected block indices in [0, ", teacher_depth - 1, "]");
  for (std::size_t i = 1; i < keep.size(); ++i)
    DIT_CHECK(keep[i] != keep[i - 1], "--keep lists block ", keep[i],
              " twice: expected distinct blocks of the teacher's ", teacher_depth);
  return keep;
}

std::vector<GroupSize> parse_groups_text(const std::string& text, int teacher_depth, int depth,
                                         std::size_t max_choices) {
  std::vector<GroupSize> groups;
  std::stringstream ss(text);
  std::string item;
  int first = 0, kept = 0;
  while (std::getline(ss, item, ',')) {
    const std::size_t colon = item.find(':');
    int m = 0, n = 0;
    std::size_t used_m = 0, used_n = 0;
    if (colon != std::string::npos) try {
        m = std::stoi(item.substr(0, colon), &used_m);
        n = std::stoi(item.substr(colon + 1), &used_n);
      } catch (const std::exception&) {
        used_m = 0;
      }
    DIT_CHECK(used_m == colon && colon > 0 && used_n == item.size() - colon - 1, "--groups ", text, ": '", item,
              "' is not M:N (a group of M blocks keeping N of them, e.g. 4:2)");
    DIT_CHECK(m >= 1 && n >= 1 && n <= m, "--groups ", text, ": '", item, "' keeps ", n, " of ", m,
              " blocks; expected 1 <= N <= M");
    groups.push_back({m, n});
    first += m;
    kept += n;
    DIT_CHECK(first <= teacher_depth, "--groups ", text, ": the groups cover ", first, " blocks past the teacher's ",
              teacher_depth, "; they must tile its depth exactly");
  }
  DIT_CHECK(!groups.empty(), "--groups '", text, "': expected M:N,... (e.g. 4:2,4:2)");
  DIT_CHECK(first == teacher_depth, "--groups ", text, ": the groups cover ", first, " of the teacher's ",
            teacher_depth, " blocks; they must tile its depth exactly");
  DIT_CHECK(kept == depth, "--groups ", text, " keeps ", kept, " blocks but --depth is ", depth);
  for (const GroupSize& g : groups)
    DIT_CHECK(choices(g.size, g.keep, max_choices) <= max_choices, "--groups ", text, ": a group of ", g.size,
              " keeping ", g.keep, " has more than ", max_choices, " choices; use smaller groups");
  return groups;
}

}  // namespace dit

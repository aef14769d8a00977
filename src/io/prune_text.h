// Integer lists as the user types them (--classes 0,3,7), and the block lists of `dit_mp prune`:
// --keep 0,2,5 (the teacher blocks an
// index prune keeps) and --groups 4:2,4:2 (learned pruning's groups), parsed and checked here
// against the teacher's depth and the pruned depth, each failure one line naming the flag. The
// engine (engine/prune.h, engine/layer_gates.h) takes the parsed values.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace dit {

// "0,3,7" -> {0, 3, 7} (empty items skipped); `what` names the flag in the message.
std::vector<int> parse_int_list(const std::string& text, const char* what);

// "i,j,...": `depth` distinct blocks of a teacher of `teacher_depth`, in model order (any order
// is accepted).
std::vector<int> parse_keep_text(const std::string& text, int teacher_depth, int depth);

// A run of `size` teacher blocks of which `keep` stay.
struct GroupSize {
  int size = 0, keep = 0;
  bool operator==(const GroupSize&) const = default;
};

// "M:N,M:N,...": groups of M blocks keeping N each (1 <= N <= M), tiling the teacher's depth in
// order and keeping `depth` blocks in all, none with more than `max_choices` choices of N of M.
std::vector<GroupSize> parse_groups_text(const std::string& text, int teacher_depth, int depth,
                                         std::size_t max_choices);

}  // namespace dit

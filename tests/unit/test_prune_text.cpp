// Integer lists (--classes) and the block lists of `dit_mp prune` (--keep, --groups): parsed in io/, each refusal naming the flag
// and what fits.
#include <gtest/gtest.h>

#include <functional>

#include "core/error.h"
#include "io/prune_text.h"
#include "io_test_util.h"

namespace dit {
namespace {

using io_test::error_of;

TEST(PruneText, IntListsNameTheirFlag) {
  EXPECT_EQ(parse_int_list("0,3,,7", "--classes"), (std::vector<int>{0, 3, 7}));
  EXPECT_TRUE(parse_int_list("", "--classes").empty());
  EXPECT_NE(error_of([] { parse_int_list("1,2x", "--classes"); }).find("--classes: '2x' is not an integer"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_int_list("99999999999", "--classes"); }).find("is not an integer"), std::string::npos);
}

TEST(PruneText, KeepListsDistinctTeacherBlocks) {
  EXPECT_EQ(parse_keep_text("3,0,1", 4, 3), (std::vector<int>{0, 1, 3}));
  EXPECT_NE(error_of([] { parse_keep_text("1,1", 4, 2); }).find("--keep lists block 1 twice"), std::string::npos);
  EXPECT_NE(error_of([] { parse_keep_text("1,4", 4, 2); }).find("--keep 4: the teacher has 4 blocks"), std::string::npos);
  EXPECT_NE(error_of([] { parse_keep_text("-1,2", 4, 2); }).find("--keep -1: the teacher has 4 blocks"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_keep_text("0,1,2", 4, 2); }).find("--keep lists 3 blocks but --depth is 2"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_keep_text("0,x", 4, 2); }).find("--keep: 'x' is not an integer"), std::string::npos);
}

TEST(PruneText, GroupsTileTheDepth) {
  EXPECT_EQ(parse_groups_text("4:2,4:2", 8, 4, 4096), (std::vector<GroupSize>{{4, 2}, {4, 2}}));
  EXPECT_EQ(parse_groups_text("3:1,5:3", 8, 4, 4096), (std::vector<GroupSize>{{3, 1}, {5, 3}}));
  const auto refuses = [](const char* text, int teacher, int depth, const char* what) {
    try {
      parse_groups_text(text, teacher, depth, 4096);
      ADD_FAILURE() << text << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("--groups"), std::string::npos) << e.what();
    }
  };
  refuses("4:2,2:1", 8, 3, "cover 6 of the teacher's 8 blocks");
  refuses("4:2,4:2,2:1", 8, 5, "past the teacher's 8");
  refuses("4:2,4:1", 8, 4, "keeps 3 blocks but --depth is 4");
  refuses("4:5,4:2", 8, 4, "expected 1 <= N <= M");
  refuses("4:0,4:2", 8, 2, "expected 1 <= N <= M");
  refuses("4-2,4:2", 8, 4, "is not M:N");
  refuses("4:2x,4:2", 8, 4, "is not M:N");
  refuses(":2,4:2", 8, 4, "is not M:N");
  refuses("", 8, 4, "expected M:N,...");
  refuses("30:15", 30, 15, "more than 4096 choices");
}

}  // namespace
}  // namespace dit

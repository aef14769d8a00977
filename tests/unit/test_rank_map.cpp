// The rank map's placement checks on made-up node names: tp groups that stay on one node pass,
// a tp group split over two nodes is named, GPUs shared by several ranks are noted.
#include <gtest/gtest.h>

#include "run/rank_map.h"

namespace dit {
namespace {

std::vector<RankPlace> nodes_of(int ranks, int per_node, bool gpus) {
  std::vector<RankPlace> p;
  for (int r = 0; r < ranks; ++r)
    p.push_back({"node" + std::to_string(r / per_node), gpus ? "cuda:" + std::to_string(r % per_node) : "cores 0-7"});
  return p;
}

TEST(RankMap, TpGroupsOnOneNodeWhenNodesHoldMultiplesOfTp) {
  // 16 ranks, 8 per node, tp 4 pp 2 dp 2: every tp group is 4 consecutive ranks on one node.
  const std::string m = format_rank_map(Layout{4, 2, 2}, nodes_of(16, 8, true), true);
  EXPECT_NE(m.find("rank  13  node node1"), std::string::npos) << m;
  EXPECT_NE(m.find("tp 1 pp 1 dp 1"), std::string::npos) << m;
  EXPECT_EQ(m.find("warning"), std::string::npos) << m;
  EXPECT_EQ(m.find("note"), std::string::npos) << m;
}

TEST(RankMap, NamesTpGroupsThatSpanNodes) {
  // 6 ranks per node with tp 4: the group of ranks 4-7 straddles node0 and node1.
  const std::string m = format_rank_map(Layout{4, 1, 3}, nodes_of(12, 6, false), false);
  EXPECT_NE(m.find("warning: tp group 1 spans nodes node0, node1"), std::string::npos) << m;
  EXPECT_EQ(m.find("tp group 0 spans"), std::string::npos) << m;
  EXPECT_EQ(m.find("tp group 2 spans"), std::string::npos) << m;
}

TEST(RankMap, NotesSharedGpus) {
  std::vector<RankPlace> p = nodes_of(4, 4, true);
  p[3].where = "cuda:0";
  const std::string m = format_rank_map(Layout{2, 1, 2}, p, true);
  EXPECT_NE(m.find("note: 2 ranks share cuda:0 on node node0"), std::string::npos) << m;
}

}  // namespace
}  // namespace dit

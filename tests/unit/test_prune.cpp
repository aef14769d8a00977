// Depth pruning (engine/prune.h): the student's weights file holds the teacher's kept blocks bit for
// bit under their new names with the provenance in /config; the kept blocks are checked; the block
// scores see a block that does nothing as the most droppable, by either score.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "core/philox.h"
#include "engine/prune.h"
#include "io/h5.h"
#include "io/sealed_h5.h"
#include "io/model_config_h5.h"
#include "io/weights.h"
#include "io_test_util.h"
#include "parallel/comm.h"
#include "random_weights.h"
#include "tiny_model.h"

namespace dit {
namespace {

using io_test::Scratch;


std::string swap_block(const std::string& name, int from, int to) {
  const std::string p = "blocks." + std::to_string(from) + ".";
  return name.rfind(p, 0) == 0 ? "blocks." + std::to_string(to) + "." + name.substr(p.size()) : name;
}

TEST(Prune, ByIndexCopiesTheKeptBlocksBitForBit) {
  Scratch dir("prune");
  DiTConfig teacher = tiny_dit(2, 5, 2, 5);
  teacher.learn_sigma = false;
  const auto tensors = random_tensors(teacher, 7);
  save_weights(dir / "teacher.h5", teacher, tensors, 500, diffusion::Objective::Flow);
  EXPECT_TRUE(read_kept_layers(dir / "teacher.h5").empty());  // a trained model records none
  EXPECT_TRUE(read_weights_provenance(dir / "teacher.h5").empty());

  const std::vector<int> keep = {4, 0, 2};  // any order: the student keeps model order
  write_pruned_weights(dir / "teacher.h5", dir / "student.h5", checked_keep(keep, 5, 3), "index");
  const DiTConfig student = read_weights_config(dir / "student.h5");
  EXPECT_EQ(student.depth, 3);
  EXPECT_EQ(h5::config_differences(student, student_config(teacher, 3)), "");
  EXPECT_EQ(read_weights_diffusion_steps(dir / "student.h5"), 500);
  EXPECT_EQ(read_weights_objective(dir / "student.h5"), diffusion::Objective::Flow);
  const WeightsProvenance p = read_weights_provenance(dir / "student.h5");
  EXPECT_EQ(p.kept_layers, (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(p.teacher_depth, 5);
  EXPECT_EQ(p.pruned_by, "index");
  EXPECT_EQ(read_kept_layers(dir / "student.h5"), (std::vector<int>{0, 2, 4}));

  const h5::File f = h5::File::open_read(dir / "student.h5");
  const int kept[] = {0, 2, 4};
  int blocks = 0;
  for (const ParamSpec& s : DiTStage::declare(student, StageLayout::whole(student))) {
    std::string from = s.name;
    for (int j = 0; j < 3; ++j)
      if (s.name.rfind("blocks." + std::to_string(j) + ".", 0) == 0) from = swap_block(s.name, j, kept[j]), ++blocks;
    const std::vector<float> got = read_weight_tensor(f, s.name, s.global);
    const std::vector<float>& want = tensors.at(from);
    ASSERT_EQ(got.size(), want.size()) << s.name;
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << s.name << " vs " << from;
  }
  EXPECT_GT(blocks, 3);  // every block's tensors were compared
  // The student loads as any weights file does.
  std::unique_ptr<Backend> be = make_backend("cpu");
  SelfComm tp;
  DiTStage model(*be, student, StageLayout::whole(student), tp);
  EXPECT_NO_THROW(load_weights(dir / "student.h5", model.params()));
}

void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error, expected one containing: " << part;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Prune, KeptBlocksAreChecked) {
  EXPECT_EQ(checked_keep({3, 1}, 4, 2), (std::vector<int>{1, 3}));
  expect_error([] { checked_keep({1, 1}, 4, 2); }, "teacher block 1 kept twice");
  expect_error([] { checked_keep({1, 4}, 4, 2); }, "kept block 4 is not one of the teacher's 4");
  expect_error([] { checked_keep({-1, 2}, 4, 2); }, "kept block -1 is not one of the teacher's 4");
  expect_error([] { checked_keep({0, 1, 2}, 4, 2); }, "keeping 3 teacher blocks for a student of depth 2");
}

TEST(Prune, ScoresDropTheRightBlocksNeverTheLast) {
  // cos: the most similar go; the last block stays even when it is the most similar.
  EXPECT_EQ(keep_by_scores({0.5, 0.9, 0.7, 0.99}, 2, BlockScore::Cos), (std::vector<int>{0, 3}));
  // loss: the least rise goes.
  EXPECT_EQ(keep_by_scores({0.5, 0.01, 0.7, 0.0}, 2, BlockScore::Loss), (std::vector<int>{2, 3}));
  EXPECT_EQ(keep_by_scores({0.1, 0.1, 0.1}, 1, BlockScore::Loss), (std::vector<int>{2}));
  expect_error([] { keep_by_scores({0.1, 0.2}, 2, BlockScore::Cos); }, "pruning to depth 2: expected 1 to 1");
}

// A block whose adaLN output is zero gates both its branches to zero: it passes x through exactly,
// so its cosine similarity is 1 and skipping it leaves the loss exactly as it was.
TEST(Prune, AnIdentityBlockScoresAsTheOneToDrop) {
  for (const diffusion::Objective objective : {diffusion::Objective::Ddpm, diffusion::Objective::Flow}) {
    DiTConfig cfg = tiny_dit(2, 4, 2, 5);
    cfg.learn_sigma = objective == diffusion::Objective::Ddpm;
    auto tensors = random_tensors(cfg, 11);
    for (const char* part : {"weight", "bias"})
      std::fill_n(tensors.at(std::string("blocks.1.adaLN_modulation.1.") + part).begin(),
                  tensors.at(std::string("blocks.1.adaLN_modulation.1.") + part).size(), 0.f);
    std::unique_ptr<Backend> be = make_backend("cpu");
    SelfComm tp;
    DiTStage model(*be, cfg, StageLayout::whole(cfg), tp);
    for (std::size_t i = 0; i < model.params().size(); ++i)
      model.params().set_global(static_cast<int>(i), tensors.at(model.params().specs()[i].name));
    const SyntheticDataset data({2, 8, 8}, 5, 40, 3);
    ScoreRecipe recipe;
    recipe.objective.objective = objective;
    const Calibration cal = draw_calibration(data, cfg, recipe, 20, 5);  // 16 + 4 rows
    ASSERT_EQ(cal.y.size(), 20u);
    const BlockScores cos = score_blocks(*be, model, cal, recipe, BlockScore::Cos);
    ASSERT_EQ(cos.score.size(), 4u);
    EXPECT_NEAR(cos.score[1], 1.0, 1e-12);
    for (int b : {0, 2, 3}) EXPECT_LT(cos.score[b], 1.0 - 1e-6) << b;
    EXPECT_EQ(keep_by_scores(cos.score, 3, BlockScore::Cos), (std::vector<int>{0, 2, 3}));
    const BlockScores loss = score_blocks(*be, model, cal, recipe, BlockScore::Loss);
    EXPECT_GT(loss.full_loss, 0);
    EXPECT_EQ(loss.score[1], 0.0);
    for (int b : {0, 2, 3}) EXPECT_NE(loss.score[b], 0.0) << b;
    // The same seed gives the same batch and scores; another seed another batch.
    EXPECT_EQ(score_blocks(*be, model, cal, recipe, BlockScore::Loss).score, loss.score);
    const Calibration other = draw_calibration(data, cfg, recipe, 20, 6);
    EXPECT_NE(score_blocks(*be, model, other, recipe, BlockScore::Cos).score, cos.score);
    // A forward that keeps only each block's output (as dit_mp prune runs it) scores the same.
    StageOptions full;
    full.recompute = Recompute::Full;
    DiTStage lean(*be, cfg, StageLayout::whole(cfg), tp, 1, full);
    for (std::size_t i = 0; i < lean.params().size(); ++i)
      lean.params().set_global(static_cast<int>(i), tensors.at(lean.params().specs()[i].name));
    EXPECT_EQ(score_blocks(*be, lean, cal, recipe, BlockScore::Cos).score, cos.score);
    EXPECT_EQ(score_blocks(*be, lean, cal, recipe, BlockScore::Loss).score, loss.score);
  }
}

}  // namespace
}  // namespace dit

namespace dit {
namespace {

// The seal's check is remembered per unchanged file (a run checks its teacher once per layout it
// considers): a file changed in place after a remembered check is checked again and caught.
TEST(Seal, AFileDamagedAfterARememberedCheckIsCaught) {
  Scratch dir("seal");
  const DiTConfig cfg = tiny_dit(2, 1, 2, 3);
  save_weights(dir / "w.h5", cfg, random_tensors(cfg, 2), 1000, diffusion::Objective::Ddpm);
  std::this_thread::sleep_for(std::chrono::milliseconds(3100));  // old enough to be remembered
  const std::uint32_t crc = h5::verified_crc32(dir / "w.h5", "");
  EXPECT_EQ(h5::verified_crc32(dir / "w.h5", ""), crc);
  {
    std::fstream f(dir / "w.h5", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2000);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    f.seekp(2000);
    f.write(&c, 1);
  }
  EXPECT_THROW(h5::verified_crc32(dir / "w.h5", ""), Error);
}

}  // namespace
}  // namespace dit

// A run's identity and the checks that keep checkpoints with their run (see run_identity.h).
#include "run/run_identity.h"

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "core/error.h"
#include "run/run_folder.h"
#include "io/file_safety.h"

namespace dit {

namespace fs = std::filesystem;

namespace {

bool same_folder(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  return fs::weakly_canonical(fs::absolute(a, ec), ec) == fs::weakly_canonical(fs::absolute(b, ec), ec);
}

std::string run_name(const std::string& id) {
  return id.empty() ? "a run from before run ids (no run_id recorded)" : "run " + id;
}

}  // namespace

std::string agreed_new_run_id(Comm& world) {
  std::int32_t words[4] = {0, 0, 0, 0};
  if (world.rank() == 0) {
    std::random_device rd;
    for (std::int32_t& w : words) w = static_cast<std::int32_t>(rd());
  }
  world.broadcast(Tensor{words, DType::I32, {4}, Device::Host}, 0);
  char hex[33];
  for (int i = 0; i < 4; ++i) std::snprintf(hex + 8 * i, 9, "%08x", static_cast<std::uint32_t>(words[i]));
  return std::string(hex, 32);
}

std::string recorded_run_id(const std::string& run_dir) {
  std::istringstream text(read_regular((fs::path(run_dir) / "config.toml").string(), "the run's config.toml"));
  try {
    return RunConfig::from_toml(text.str(), run_dir + "/config.toml").run.id;
  } catch (const Error&) {
    return "";
  }
}

void check_new_checkpoint_root(const RunConfig& cfg, const std::string& root) {
  const std::vector<std::string> found = complete_checkpoints(root);
  if (found.empty()) return;
  if (cfg.run.overwrite)  // the folder --overwrite clears with the run folder (make_folder)
    for (const std::string& name : checkpoint_folders(cfg.run.dir))
      if (same_folder(root, fs::path(cfg.run.dir) / name)) return;
  std::string owner = "a run whose index cannot be read";
  try {
    owner = run_name(read_checkpoint_meta(found.front()).run_id);
  } catch (const Error&) {
  }
  DIT_FAIL("run.checkpoint_dir ", root, " already holds ", found.size(), " checkpoint(s) of ", owner, " (newest ",
           found.front(), "): a new run writes its checkpoints into an empty folder; continue that run with "
           "--resume auto and its own run.dir, start from its weights with --init-from, or choose another "
           "run.checkpoint_dir");
}

std::string check_same_run(const CheckpointMeta& meta, const std::string& folder_id, const std::string& run_dir) {
  if (meta.run_id.empty())
    return "note: the checkpoint " + meta.dir + " records no run id (written before run ids): it is taken as " +
           (folder_id.empty() ? "this run's" : "run " + folder_id + "'s");
  DIT_CHECK(folder_id.empty() || folder_id == meta.run_id, "the checkpoint ", meta.dir, " belongs to run ",
            meta.run_id, ", but run.dir ", run_dir, " is run ", folder_id,
            ": a resume continues only its own run's checkpoints; resume it with that run's run.dir, or start a "
            "new run from its weights (--init-from ", meta.dir, ")");
  return "";
}

}  // namespace dit

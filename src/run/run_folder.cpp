// Replacing a run folder under --overwrite, and nothing else (see run_folder.h).
#include "run/run_folder.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "core/error.h"
#include "io/checkpoint_format.h"
#include "io/command_files.h"
#include "io/file_safety.h"

namespace dit {

namespace fs = std::filesystem;

namespace {

// The header RunConfig::to_toml() writes first: a config.toml that starts so is dit_mp's.
constexpr const char* kConfigHeader = "# dit_mp run configuration";

// Files a run writes into its folder: those the train command declares in it (io/command_files.h:
// the weights, grid, metrics, accounting, evaluation and plots.log), the grids of each sampling
// step, the plots, the report (dit_mp report's default --out), and the temporaries of its writers
// as they name them: write_atomically's "<name>.tmp-<host>-<pid>" (atomic_file.h) and plot_run.py's
// ".tmp", ".tmp.png". A user's "model.h5.tmp-notes" is none of these, and stays.
bool run_file(const std::string& name) {
  static const std::regex known([] {
    std::string names = R"(samples_step_\d{7}\.(png|h5)|loss\.png|throughput\.png|quality\.png|report\.html)";
    for (const FileDecl& d : files_of("train"))
      if (std::string(d.derive).rfind("dir:", 0) == 0)
        names += "|" + std::regex_replace(std::string(d.derive + 4), std::regex(R"(\.)"), R"(\.)");
    return "(" + names + R"()((\.tmp-[A-Za-z0-9._-]+-\d+)|(\.tmp(\.png)?))?)";
  }());
  return std::regex_match(name, known);
}

// A checkpoint root as save_checkpoint leaves it: step folders, `latest`, and its temporaries.
bool checkpoint_root_entry(const std::string& name) {
  static const std::regex known(R"((\.(tmp|old)-)?step_\d+|latest(\.tmp.*)?)");
  return std::regex_match(name, known);
}

// The run's TensorBoard folder (train.tensorboard) as its writer leaves it (run/tensorboard.h).
constexpr const char* kTensorBoardFolder = "tb";
bool tensorboard_entry(const std::string& name) {
  static const std::regex known(R"(events\.out\.tfevents\.\d+\.[A-Za-z0-9._-]+\.\d+\.dit_mp)");
  return std::regex_match(name, known);
}

// An entry of a checkpoint root that save_checkpoint did not leave: a name it never gives, a step
// name that is not a folder, or a step folder without its COMPLETE marker (a save renames its folder
// into place only once the marker is in it). Empty when the entry is dit_mp's.
std::string foreign_root_entry(const fs::directory_entry& e) {
  const std::string name = e.path().filename().string();
  std::error_code ec;
  const bool folder = e.is_directory(ec) && !e.is_symlink(ec);
  if (!checkpoint_root_entry(name)) return name + (folder ? "/" : "");
  if (name.rfind("step_", 0) != 0) return "";
  if (!folder) return name;
  if (!fs::is_regular_file(e.path() / ckpt::kCompleteFile, ec)) return name + "/ (no COMPLETE marker: no finished save)";
  return "";
}

std::string listed(const std::vector<std::string>& names) {
  std::string s;
  for (std::size_t i = 0; i < names.size() && i < 5; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > 5) s += " and " + std::to_string(names.size() - 5) + " more";
  return s;
}

bool written_by_dit_mp(const fs::path& config) {
  return read_regular(config.string(), "the run's config.toml").rfind(kConfigHeader, 0) == 0;
}

}  // namespace

std::vector<std::string> checkpoint_folders(const std::string& dir) {
  std::vector<std::string> out = {"ckpt"};
  std::istringstream text(read_regular((fs::path(dir) / "config.toml").string(), "the run's config.toml"));
  std::string recorded;
  try {
    recorded = RunConfig::from_toml(text.str(), dir + "/config.toml").run.checkpoint_dir;
  } catch (const Error&) {  // not a config this version reads: only ckpt/
  }
  if (recorded.empty()) return out;
  std::error_code ec;
  const fs::path r = fs::weakly_canonical(fs::absolute(recorded, ec), ec);
  if (!ec && r.parent_path() == fs::weakly_canonical(fs::absolute(dir, ec), ec) && r.filename() != "ckpt")
    out.push_back(r.filename().string());
  return out;
}

std::vector<std::string> foreign_entries(const std::string& dir) {
  std::vector<std::string> out;
  std::vector<std::string> roots = checkpoint_folders(dir);
  roots.push_back(kTensorBoardFolder);
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && !e.is_symlink()) {
      if (std::find(roots.begin(), roots.end(), name) == roots.end()) {
        out.push_back(name + "/");
        continue;
      }
      if (name == kTensorBoardFolder) {
        for (const auto& c : fs::directory_iterator(e.path()))
          if (!tensorboard_entry(c.path().filename().string()))
            out.push_back(name + "/" + c.path().filename().string() + (c.is_directory() ? "/" : ""));
        continue;
      }
      for (const std::string& f : foreign_checkpoint_entries(e.path().string())) out.push_back(name + "/" + f);
    } else if (!e.is_regular_file() || e.is_symlink() || !run_file(name)) {
      out.push_back(name);
    }
  }
  return out;
}

std::vector<std::string> foreign_checkpoint_entries(const std::string& root) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    std::string f = foreign_root_entry(e);
    if (!f.empty()) out.push_back(std::move(f));
  }
  return out;
}

void check_checkpoint_root(const std::string& root) {
  std::error_code ec;
  if (!fs::exists(root, ec)) return;
  DIT_CHECK(fs::is_directory(root, ec), "run.checkpoint_dir ", root, " is a file, not a folder: choose another "
            "run.checkpoint_dir");
  const std::vector<std::string> foreign = foreign_checkpoint_entries(root);
  DIT_CHECK(foreign.empty(), "run.checkpoint_dir ", root, " holds ", listed(foreign), ", which dit_mp did not "
            "write: a checkpoint folder holds only a run's step folders and latest, and a save would replace or "
            "prune what is there; move them or choose another run.checkpoint_dir");
}

void check_overwritable(const RunConfig& cfg) {
  const fs::path dir(cfg.run.dir);
  if (!fs::exists(dir)) return;
  DIT_CHECK(fs::is_directory(dir), "run.dir ", dir.string(), " is a file, not a run folder: --overwrite replaces "
            "only a run folder dit_mp wrote; choose another run.dir");
  // That no input lies inside it is the files' check (app/command_files.cpp, check_train_files).
  if (fs::is_empty(dir)) return;
  DIT_CHECK(written_by_dit_mp(dir / "config.toml"), "run.dir ", dir.string(),
            " is not a run folder (no config.toml written by dit_mp in it): --overwrite replaces only a run "
            "folder dit_mp wrote; choose another run.dir");
  const std::vector<std::string> foreign = foreign_entries(dir.string());
  if (foreign.empty()) return;
  DIT_FAIL("run.dir ", dir.string(), " holds ", listed(foreign), ", which dit_mp did not write: --overwrite replaces only "
           "a run's own files; move them or choose another run.dir");
}

void check_resumable(const RunConfig& cfg) {
  const fs::path dir(cfg.run.dir);
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  DIT_CHECK(fs::is_directory(dir, ec), "run.dir ", dir.string(), " is a file, not a run folder: --resume continues "
            "a run folder dit_mp wrote; choose another run.dir");
  if (fs::is_empty(dir, ec) || written_by_dit_mp(dir / "config.toml")) return;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir, ec)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  DIT_FAIL("run.dir ", dir.string(), " is not a run folder (no config.toml written by dit_mp in it) and holds ",
           listed(names), ": --resume continues only a run's folder (a run would write over the files there); "
           "move them or choose another run.dir");
}

bool holds_failed_start(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec) || fs::is_empty(dir, ec) || !written_by_dit_mp(fs::path(dir) / "config.toml") ||
      !foreign_entries(dir).empty())
    return false;
  // Nothing a step leaves: no file but config.toml holds a byte (metrics.jsonl and ranks.jsonl are
  // opened empty at start), no checkpoint; the TensorBoard folder's header events aside.
  const std::vector<std::string> roots = checkpoint_folders(dir);
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name == kTensorBoardFolder) continue;
    if (std::find(roots.begin(), roots.end(), name) != roots.end()) {
      if (!fs::is_empty(e.path(), ec)) return false;
      continue;
    }
    if (name != "config.toml" && (!e.is_regular_file(ec) || e.file_size(ec) != 0)) return false;
  }
  return true;
}

void clear_run_folder(const std::string& dir) {
  if (!fs::exists(dir)) return;
  std::vector<std::string> roots = checkpoint_folders(dir);
  roots.push_back(kTensorBoardFolder);
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (std::find(roots.begin(), roots.end(), name) != roots.end() && e.is_directory() && !e.is_symlink()) {
      for (const auto& c : fs::directory_iterator(e.path()))
        if (name == kTensorBoardFolder ? tensorboard_entry(c.path().filename().string()) : foreign_root_entry(c).empty())
          fs::remove_all(c.path());
      std::error_code ec;
      fs::remove(e.path(), ec);  // only when empty
    } else if (e.is_regular_file() && !e.is_symlink() && run_file(name)) {
      fs::remove(e.path());
    }
  }
}

}  // namespace dit

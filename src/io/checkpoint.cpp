// Save, load, latest and inspect of sharded checkpoints (see checkpoint.h). The format's pieces
// (boxes, mapping validation, shard reads, HDF5 writing) are in checkpoint_format.h.
#include "io/checkpoint.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>

#include "io/atomic_file.h"
#include "parallel/agree.h"
#include "io/checkpoint_format.h"
#include "io/model_config_h5.h"
#include "io/checkpoint_manifest.h"
#include "layers/dit_stage.h"
#include "io/file_safety.h"

namespace dit {

namespace fs = std::filesystem;
using ckpt::kKinds;

namespace {

constexpr const char* kLatestFile = "latest";

std::string step_name(std::int64_t step) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

// The step of a folder named "step_<digits>", or -1.
std::int64_t parse_step(const std::string& name) {
  if (name.size() < 6 || name.size() > 23 || name.compare(0, 5, "step_") != 0) return -1;
  std::int64_t v = 0;
  for (std::size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

bool is_complete(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / ckpt::kCompleteFile, ec);
}

const std::vector<float>& kind_of(const StageState& s, int k) {
  const std::vector<float>* v[] = {&s.model, &s.ema, &s.exp_avg, &s.exp_avg_sq};
  return *v[k];
}
std::vector<float>& kind_of(StageState& s, int k) {
  return const_cast<std::vector<float>&>(kind_of(static_cast<const StageState&>(s), k));
}

// The first tensor of `st` (as "<kind>/<name>") holding a NaN or Inf in the part of this rank's
// slice it holds, or "".
std::string first_nonfinite(const StateView& st, const ParamSet& ps) {
  const FlatRange r = st.range();
  std::vector<float> scratch;
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < int(ps.size()); ++i) {
      const std::int64_t a = std::max(r.begin, ps.offset(i));
      const std::int64_t b = std::min(r.end, ps.offset(i) + ps.specs()[i].local(ps.tp()).numel());
      if (a >= b) continue;
      const float* v = st.values(k, a, b, scratch);
      if (!std::all_of(v, v + (b - a), [](float x) { return std::isfinite(x); }))
        return std::string(kKinds[k]) + "/" + ps.specs()[i].name;
    }
  return "";
}

std::string shard_name(const GridCoord& c) {
  return "shard_tp" + std::to_string(c.tp) + "_pp" + std::to_string(c.pp) + "_dp" +
         std::to_string(c.dp) + ".h5";
}

std::string join(const std::string& kind, const std::string& name) { return kind + "/" + name; }

// The step folder `path` names: itself, or the newest complete one when it is a root.
std::string step_dir(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (p.has_parent_path() && p.filename().empty()) p = p.parent_path();
  if (p.filename() == ckpt::kIndexFile && fs::is_regular_file(p)) p = p.parent_path();
  DIT_CHECK(fs::is_directory(p), path, ": no such checkpoint folder");
  if (parse_step(p.filename().string()) >= 0 || fs::exists(p / ckpt::kIndexFile) ||
      fs::exists(p / ckpt::kCompleteFile))
    return p.string();
  const std::string latest = latest_checkpoint(p.string());
  DIT_CHECK(!latest.empty(), path,
            ": no complete checkpoint here (no step_* folder with a COMPLETE marker)");
  return latest;
}

h5::File open_index(const std::string& dir) {
  DIT_CHECK(is_complete(dir), dir,
            ": incomplete checkpoint (no COMPLETE marker: its save did not finish)");
  ckpt::verify_index_sum(dir);  // before HDF5 parses any of it
  return h5::File::open_read(dir + "/" + ckpt::kIndexFile);
}

CheckpointMeta read_meta(const h5::File& index, const std::string& dir) {
  const std::string& p = index.path();
  DIT_CHECK(index.has_attr("/", "format_version"), p,
            ": attribute format_version is missing (not a dit_mp checkpoint index)");
  CheckpointMeta m;
  const std::int64_t version = h5::read_attr_int(index, "/", "format_version");
  DIT_CHECK(version == kCheckpointFormatVersion, p, ": checkpoint format version ", version,
            version > kCheckpointFormatVersion ? " (written by a newer dit_mp)" : "",
            "; this dit_mp reads version ", kCheckpointFormatVersion);
  m.format_version = static_cast<int>(version);
  m.step = h5::read_attr_int(index, "/", "step");
  DIT_CHECK(m.step >= 0, p, ": step ", m.step, " is negative");
  const auto l = h5::read_attr_ints(index, "/", "layout", 3);
  for (std::int64_t v : l)
    DIT_CHECK(v >= 1 && v <= (1 << 20), p, ": layout [", l[0], ", ", l[1], ", ", l[2],
              "] is not a tp, pp, dp layout");
  m.layout = {static_cast<int>(l[0]), static_cast<int>(l[1]), static_cast<int>(l[2])};
  m.seed = h5::read_attr_u64(index, "/", "seed");
  m.loss_scale = h5::read_attr_double(index, "/", "loss_scale");
  DIT_CHECK(std::isfinite(m.loss_scale) && m.loss_scale > 0, p, ": loss_scale ", m.loss_scale,
            ", expected a positive number");
  // Written since fp16 loss scaling; a checkpoint without them never skipped a step.
  if (index.has_attr("/", "loss_scale_clean_steps"))
    m.loss_scale_clean_steps = h5::read_attr_int(index, "/", "loss_scale_clean_steps");
  if (index.has_attr("/", "skipped_steps")) m.skipped_steps = h5::read_attr_int(index, "/", "skipped_steps");
  if (index.has_attr("/", "loss_scaling")) m.loss_scaling = h5::read_attr_int(index, "/", "loss_scaling") != 0;
  DIT_CHECK(m.loss_scale_clean_steps >= 0 && m.skipped_steps >= 0 && m.skipped_steps <= m.step, p,
            ": loss_scale_clean_steps ", m.loss_scale_clean_steps, " and skipped_steps ", m.skipped_steps,
            ", expected counts in [0, step = ", m.step, "]");
  m.config_toml = index.attr_string("/", "config_toml");
  if (index.has_attr("/", "run_id")) m.run_id = index.attr_string("/", "run_id");
  m.dir = dir;
  return m;
}

// --- save --------------------------------------------------------------------------------------

void check_save_inputs(const CheckpointMeta& meta, const DiTConfig& cfg, const ParamSet& ps,
                       const ParallelContext& ctx, const StateView& st) {
  DIT_CHECK(meta.step >= 0, "checkpoint step ", meta.step, " is negative");
  DIT_CHECK(ps.tp() == ctx.layout.tp && ps.tp_rank() == ctx.coord.tp, "checkpoint: parameters ",
            "sliced for tp rank ", ps.tp_rank(), " of ", ps.tp(), " on a rank at tp ", ctx.coord.tp,
            " of ", ctx.layout.tp);
  for (int k = 1; k < 4; ++k)
    DIT_CHECK(st.sizes[k] == st.sizes[0], "checkpoint: state '", kKinds[k], "' has ", st.sizes[k], " values, '",
              kKinds[0], "' ", st.sizes[0]);
  if (st.tail != nullptr) {
    for (int k = 1; k < 4; ++k)
      DIT_CHECK(kind_of(*st.tail, k).size() == st.tail->model.size(), "checkpoint: the state's tail of '", kKinds[k],
                "' has ", kind_of(*st.tail, k).size(), " values, '", kKinds[0], "' ", st.tail->model.size());
    DIT_CHECK(st.tail->begin == st.begin + st.sizes[0], "checkpoint: the state's tail starts at flat element ",
              st.tail->begin, ", not where its values end (", st.begin + st.sizes[0], ")");
  }
  const FlatRange need = checkpoint_range(ps, ctx.layout.dp, ctx.coord.dp), have = st.range();
  DIT_CHECK(have.begin <= need.begin && need.end <= have.end && have.begin >= 0 && have.end <= ps.padded_numel(),
            "checkpoint: a state of flat elements ", have.begin, " to ", have.end, "; this rank writes elements ",
            need.begin, " to ", need.end, " of ", ps.padded_numel());
  std::map<std::string, ParamSpec> model;
  for (ParamSpec& s : DiTStage::declare(cfg, StageLayout::whole(cfg))) model[s.name] = s;
  for (const ParamSpec& s : ps.specs()) {
    auto it = model.find(s.name);
    DIT_CHECK(it != model.end() && it->second.global == s.global && it->second.split == s.split &&
                  it->second.groups == s.groups,
              "checkpoint: parameter '", s.name, "' ", s.global.str(),
              " is not part of the model config being saved");
  }
  const std::string bad = first_nonfinite(st, ps);
  DIT_CHECK(bad.empty(), "checkpoint of step ", meta.step, ": ", bad,
            " holds NaN or Inf values; nothing non-finite is saved (the last checkpoint stays the newest)");
}

// This rank's shard file: its checkpoint_tensors. A rank assigned nothing writes no file.
void write_shard(const fs::path& dir, const CheckpointMeta& meta, const ParamSet& ps,
                 const ParallelContext& ctx, const StateView& st) {
  const GridCoord c = ctx.coord;
  const Layout& l = ctx.layout;
  const std::vector<int> mine = checkpoint_tensors(ps, l.dp, c.dp);
  if (mine.empty()) return;
  const std::string path = (dir / shard_name(c)).string();
  std::uint64_t bound = 64 << 10;  // the superblock, root group, attributes and four groups
  for (int i : mine) bound += 4 * h5::tensor_file_bound(ps.specs()[i].local(l.tp));
  // Written straight into disk space reserved first (io/h5.h DiskFile): a full disk fails before
  // HDF5 holds the file, and the file is never a second copy of the state in memory.
  std::vector<float> scratch;  // a tensor on both sides of the state's tail, put together
  write_atomically(path, "checkpoint shard", [&](const std::string& tmp) {
    h5::DiskFile f = h5::DiskFile::create_reserved(tmp, bound, {h5::Format::V110});
    h5::write_attr_ints(f.get(), "format_version", {kCheckpointFormatVersion}, h5::AttrShape::Scalar, tmp);
    h5::write_attr_ints(f.get(), "step", {meta.step}, h5::AttrShape::Scalar, tmp);
    h5::write_attr_ints(f.get(), "layout", {l.tp, l.pp, l.dp}, h5::AttrShape::List, tmp);
    h5::write_attr_ints(f.get(), "coord", {c.tp, c.pp, c.dp}, h5::AttrShape::List, tmp);
    for (int k = 0; k < 4; ++k) {
      h5::Handle g = h5::create_group(f.get(), kKinds[k], tmp);
      for (int i : mine) {
        const ParamSpec& s = ps.specs()[i];
        const std::int64_t n = s.local(l.tp).numel();
        h5::write_tensor(g.get(), s.name, s.local(l.tp), st.values(k, ps.offset(i), ps.offset(i) + n, scratch), tmp);
      }
    }
    f.close();
  });
}

// Which shard file holds tp rank t's slice of each (kind, tensor): read back from the shards, so
// rank 0 needs no knowledge of the pipeline partition, and a shard set that does not cover the
// model exactly is caught before the index exists.
using PieceFiles = std::map<std::pair<int, std::string>, std::map<int, std::string>>;

PieceFiles list_pieces(const fs::path& dir, const Layout& layout,
                       const std::map<std::string, ParamSpec>& model) {
  PieceFiles pieces;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string file = e.path().filename().string();
    if (file.rfind("shard_", 0) != 0) continue;
    const h5::File f = h5::File::open_read(e.path().string());
    const auto lay = h5::read_attr_ints(f, "/", "layout", 3);
    const auto coord = h5::read_attr_ints(f, "/", "coord", 3);
    DIT_CHECK(lay == std::vector<std::int64_t>({layout.tp, layout.pp, layout.dp}), f.path(),
              ": written at another layout");
    for (int k = 0; k < 4; ++k)
      for (const std::string& name : f.members(kKinds[k])) {
        auto it = model.find(name);
        DIT_CHECK(it != model.end(), f.path(), ": tensor '", name, "' is not part of the model");
        DIT_CHECK(f.shape(join(kKinds[k], name)) == it->second.local(layout.tp), f.path(),
                  ": tensor '", join(kKinds[k], name), "' has the wrong local shape");
        std::string& slot = pieces[{k, name}][static_cast<int>(coord[0])];
        DIT_CHECK(slot.empty(), "tensor '", join(kKinds[k], name), "' of tp rank ", coord[0],
                  " written twice: ", slot, " and ", file);
        slot = file;
      }
  }
  return pieces;
}

void write_index(const fs::path& dir, const CheckpointMeta& meta, const DiTConfig& cfg,
                 const Layout& layout) {
  const std::vector<ParamSpec> specs = DiTStage::declare(cfg, StageLayout::whole(cfg));
  std::map<std::string, ParamSpec> model;
  for (const ParamSpec& s : specs) model[s.name] = s;
  PieceFiles pieces = list_pieces(dir, layout, model);

  const std::string path = (dir / ckpt::kIndexFile).string();
  const std::string bytes = h5::build_in_memory(path, {h5::Format::V110}, [&](hid_t id) {
    h5::write_attr_ints(id, "format_version", {kCheckpointFormatVersion}, h5::AttrShape::Scalar, path);
    h5::write_attr_ints(id, "step", {meta.step}, h5::AttrShape::Scalar, path);
    h5::write_attr_ints(id, "layout", {layout.tp, layout.pp, layout.dp}, h5::AttrShape::List, path);
    h5::write_attr_u64(id, "seed", meta.seed, path);
    h5::write_attr_double(id, "loss_scale", meta.loss_scale, path);
    h5::write_attr_ints(id, "loss_scale_clean_steps", {meta.loss_scale_clean_steps}, h5::AttrShape::Scalar, path);
    h5::write_attr_ints(id, "skipped_steps", {meta.skipped_steps}, h5::AttrShape::Scalar, path);
    h5::write_attr_ints(id, "loss_scaling", {meta.loss_scaling ? 1 : 0}, h5::AttrShape::Scalar, path);
    h5::write_attr_string(id, "config_toml", meta.config_toml, path);
    if (!meta.run_id.empty()) h5::write_attr_string(id, "run_id", meta.run_id, path);
    const h5::Handle config = h5::write_model_config(id, cfg, path);
    h5::write_attr_ints(config.get(), "out_channels", {cfg.out_channels()}, h5::AttrShape::Scalar, path);
    const float nan = std::nanf("");  // what a reader of the VDS sees where a shard is missing
    for (int k = 0; k < 4; ++k) {
      h5::Handle g = h5::create_group(id, kKinds[k], path);
      for (const ParamSpec& s : specs) {
        const std::string name = join(kKinds[k], s.name);
        const int parts = s.split == Split::Replicated ? 1 : layout.tp;
        const auto& files = pieces[{k, s.name}];
        DIT_CHECK(int(files.size()) == parts && files.rbegin()->first == parts - 1,
                  "checkpoint: tensor '", name, "' has ", files.size(), " of its ", parts,
                  " tp slices in the shards (does every stage hold its parameters?)");
        const h5::Handle dcpl = h5::creation_plist(H5P_DATASET_CREATE, path);
        DIT_H5_CHECK(H5Pset_fill_value(dcpl.get(), H5T_NATIVE_FLOAT, &nan), path, " ", name);
        const ckpt::Box whole = ckpt::Box::whole(s.global),
                        local = ckpt::Box::whole(s.local(layout.tp));
        h5::Handle vspace(H5Screate_simple(whole.rank, whole.count, nullptr), H5Sclose);
        h5::Handle sspace(H5Screate_simple(local.rank, local.count, nullptr), H5Sclose);
        for (const auto& tp_file : files) {  // (not a structured binding: clang 14 cannot capture one)
          const std::string& file = tp_file.second;
          for (const ckpt::SlicePiece& piece : ckpt::slice_pieces(s, parts, tp_file.first)) {
            h5::Handle v = ckpt::select_box(vspace.get(), piece.global, name);
            h5::Handle src = ckpt::select_box(sspace.get(), piece.local, name);
            DIT_H5_CHECK(H5Pset_virtual(dcpl.get(), v.get(), file.c_str(), name.c_str(), src.get()),
                         path, " ", name);
          }
        }
        h5::Handle d(H5Dcreate2(g.get(), s.name.c_str(), H5T_IEEE_F32LE, vspace.get(), H5P_DEFAULT,
                                dcpl.get(), H5P_DEFAULT),
                     H5Dclose);
        DIT_CHECK(bool(d), path, ": cannot create virtual dataset '", name, "' (",
                  h5::error_text(), ")");
      }
    }
  });
  write_file_atomic(path, bytes, "checkpoint index");
}

// Moves the finished folder into place (an existing folder of the same step is replaced) and
// points `latest` at it.
void publish(const fs::path& root, const fs::path& tmp, const fs::path& final_dir) {
  fs::path old;
  if (fs::exists(final_dir)) {
    old = root / (".old-" + final_dir.filename().string());
    fs::remove_all(old);
    fs::rename(final_dir, old);
  }
  fs::rename(tmp, final_dir);
  fsync_folder(root.string(), "checkpoint folder");
  write_file_atomic((root / kLatestFile).string(), final_dir.filename().string() + "\n", "checkpoint pointer");
  if (!old.empty()) fs::remove_all(old);
}

// Removes complete checkpoints of steps before `step` beyond the newest keep - 1 of them. Best
// effort: the new checkpoint is already safe, so a failure only warns.
void prune(const fs::path& root, std::int64_t step, int keep) {
  if (keep <= 0) return;
  std::map<std::int64_t, fs::path, std::greater<>> older;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::int64_t s = parse_step(e.path().filename().string());
    if (s >= 0 && s < step && e.is_directory(ec) && is_complete(e.path())) older[s] = e.path();
  }
  int kept = 1;
  for (const auto& [s, p] : older) {
    if (kept++ < keep) continue;
    fs::remove_all(p, ec);
    if (ec)
      std::fprintf(stderr, "warning: cannot remove old checkpoint %s: %s\n", p.c_str(),
                   ec.message().c_str());
  }
}

// Leftovers of saves that died: temporary folders go; a replaced folder whose replacement never
// arrived is put back.
void remove_stale(const fs::path& root) {
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(".tmp-step_", 0) == 0) fs::remove_all(e.path());
    if (n.rfind(".old-step_", 0) != 0) continue;
    if (fs::exists(root / n.substr(5)))
      fs::remove_all(e.path());
    else
      fs::rename(e.path(), root / n.substr(5));
  }
}

// One tensor and kind of this rank: the index mappings that hold parts of its slice.
struct PlannedRead {
  int i, k;
  std::string name;  // "model/blocks.0.attn.qkv.weight"
  std::vector<ckpt::Mapping> maps;
};

// Validates the index entry of every tensor and kind of `ps` and opens and checks every source it
// needs, before anything is allocated or read.
std::vector<PlannedRead> plan_reads(const h5::File& index, ckpt::ShardReader& reader,
                                    const ParamSet& ps) {
  std::vector<PlannedRead> plan;
  for (int i = 0; i < int(ps.size()); ++i) {
    const ParamSpec& s = ps.specs()[i];
    const auto pieces = ckpt::slice_pieces(s, ps.tp(), ps.tp_rank());
    for (int k = 0; k < 4; ++k) {
      PlannedRead r{i, k, join(kKinds[k], s.name), {}};
      for (ckpt::Mapping& m : ckpt::read_mappings(index, r.name, s.global)) {
        bool needed = false;
        ckpt::Box x;
        for (const auto& p : pieces) needed = needed || ckpt::intersect(p.global, m.global, x);
        if (!needed) continue;
        reader.check(m, r.name);
        r.maps.push_back(std::move(m));
      }
      plan.push_back(std::move(r));
    }
  }
  return plan;
}

// Reads every part of this rank's slice of one tensor into its place in `flat`, which holds flat
// elements from `begin` on: the tensor's values in it (one partly inside is read whole aside).
void execute(const PlannedRead& r, ckpt::ShardReader& reader, const ParamSet& ps, std::vector<float>& flat,
             std::int64_t begin) {
  const ParamSpec& s = ps.specs()[r.i];
  const Shape local = s.local(ps.tp());
  const std::int64_t first = ps.offset(r.i), end = first + local.numel();
  const std::int64_t a = std::max(first, begin), b = std::min(end, begin + std::int64_t(flat.size()));
  if (a >= b) return;
  std::vector<float> whole;
  if (a != first || b != end) whole.resize(static_cast<std::size_t>(local.numel()));
  float* dest = whole.empty() ? flat.data() + (first - begin) : whole.data();
  for (const ckpt::SlicePiece& p : ckpt::slice_pieces(s, ps.tp(), ps.tp_rank()))
    for (const ckpt::Mapping& m : r.maps) {
      ckpt::Box g;  // the part of the piece this mapping holds, in global coordinates
      if (!ckpt::intersect(p.global, m.global, g)) continue;
      ckpt::Box d = g;
      for (int a = 0; a < g.rank; ++a)
        d.start[a] = p.local.start[a] + (g.start[a] - p.global.start[a]);
      reader.read(m, g, dest, local, d, r.name);
    }
  if (!whole.empty()) std::copy(whole.begin() + (a - first), whole.begin() + (b - first), flat.begin() + (a - begin));
}

// Fault injection for tests: DIT_FAULT_KILL_DURING_SAVE="rank:step" kills that world rank with
// SIGKILL right after it wrote its shard of that step's checkpoint (before the index, the
// COMPLETE marker and the rename), the worst moment for a crash.
void fault_point_after_shard(int rank, std::int64_t step) {
  const char* spec = std::getenv("DIT_FAULT_KILL_DURING_SAVE");
  if (!spec) return;
  int r = -1;
  long long st = -1;
  if (std::sscanf(spec, "%d:%lld", &r, &st) == 2 && r == rank && st == step) std::raise(SIGKILL);
}

}  // namespace

FlatRange StateView::range() const {
  return {begin, begin + sizes[0] + (tail ? static_cast<std::int64_t>(tail->model.size()) : 0)};
}

const float* StateView::values(int k, std::int64_t a, std::int64_t b, std::vector<float>& scratch) const {
  const std::int64_t split = begin + sizes[0];
  if (b <= split) return kinds[k] + (a - begin);
  const std::vector<float>& t = kind_of(*tail, k);
  if (a >= split) return t.data() + (a - split);
  scratch.assign(kinds[k] + (a - begin), kinds[k] + sizes[k]);
  scratch.insert(scratch.end(), t.begin(), t.begin() + (b - split));
  return scratch.data();
}

std::vector<int> checkpoint_tensors(const ParamSet& ps, int dp, int dp_rank) {
  // dp rank r's ZeRO shard: [r n / dp, (r + 1) n / dp) of the padded buffer (ZeroOptimizer::shard_range)
  const std::int64_t shard = ps.padded_numel() / dp, begin = dp_rank * shard;
  std::vector<int> mine;
  for (int i = 0; i < int(ps.size()); ++i)
    if (ps.offset(i) >= begin && (ps.offset(i) < begin + shard || dp_rank == dp - 1) &&
        (ps.specs()[i].split != Split::Replicated || ps.tp_rank() == 0))
      mine.push_back(i);
  return mine;
}

FlatRange checkpoint_range(const ParamSet& ps, int dp, int dp_rank) {
  const std::vector<int> mine = checkpoint_tensors(ps, dp, dp_rank);
  if (mine.empty()) return {};
  const int last = mine.back();
  return {ps.offset(mine.front()), ps.offset(last) + ps.specs()[last].local(ps.tp()).numel()};
}

std::string save_checkpoint(const std::string& root, const CheckpointMeta& meta,
                            const DiTConfig& cfg, const ParamSet& ps, ParallelContext& ctx,
                            const StateView& state, int keep) {
  Comm& world = *ctx.world;
  const bool lead = world.rank() == 0;
  const fs::path rootp(root), final_dir = rootp / step_name(meta.step),
                              tmp = rootp / (".tmp-" + step_name(meta.step));
  try {
    agree(world, [&] {
      check_save_inputs(meta, cfg, ps, ctx, state);
      if (!lead) return;
      fs::create_directories(rootp);
      remove_stale(rootp);
      // Only a complete step folder is a save's own to replace (a save renames it into place with its marker).
      DIT_CHECK(!fs::exists(final_dir) || is_complete(final_dir), final_dir.string(), " exists without a COMPLETE "
                "marker: dit_mp did not write it, and a save replaces only its own checkpoints; move it or choose "
                "another run.checkpoint_dir");
      fs::create_directory(tmp);
    });
    agree(world, [&] {
      write_shard(tmp, meta, ps, ctx, state);
      fault_point_after_shard(world.rank(), meta.step);
    });
    agree(world, [&] {
      if (!lead) return;
      write_index(tmp, meta, cfg, ctx.layout);
      const ckpt::FileSum index_sum = ckpt::file_sum((tmp / ckpt::kIndexFile).string());
      write_file_atomic((tmp / ckpt::kCompleteFile).string(), ckpt::complete_text(meta.step, index_sum),
                        "checkpoint marker");
      publish(rootp, tmp, final_dir);
      prune(rootp, meta.step, keep);
    });
  } catch (...) {
    std::error_code ec;
    if (lead) fs::remove_all(tmp, ec);
    throw;
  }
  return final_dir.string();
}

CheckpointMeta load_checkpoint(const std::string& path, const DiTConfig& cfg, const ParamSet& ps,
                               ParallelContext& ctx, StageState& state, std::optional<FlatRange> range) {
  const FlatRange want = range.value_or(FlatRange{0, ps.padded_numel()});
  CheckpointMeta meta;
  agree(*ctx.world, [&] {
    DIT_CHECK(ps.tp() == ctx.layout.tp && ps.tp_rank() == ctx.coord.tp, "checkpoint: parameters ",
              "sliced for tp rank ", ps.tp_rank(), " of ", ps.tp(), " on a rank at tp ",
              ctx.coord.tp, " of ", ctx.layout.tp);
    const std::string dir = step_dir(path);
    const h5::File index = open_index(dir);
    meta = read_meta(index, dir);
    const DiTConfig stored = h5::read_model_config(index, h5::LaterFields::Required, "the model config");
    const std::string diff = h5::config_differences(stored, cfg);
    DIT_CHECK(diff.empty(), dir,
              ": the checkpoint's model differs from this run's (checkpoint vs run): ", diff);
    ckpt::ShardReader reader(dir, index);
    const std::vector<PlannedRead> plan = plan_reads(index, reader, ps);
    DIT_CHECK(want.begin >= 0 && want.begin <= want.end && want.end <= ps.padded_numel(), "checkpoint: elements ",
              want.begin, " to ", want.end, " asked of a stage of ", ps.padded_numel());
    state.begin = want.begin;
    for (int k = 0; k < 4; ++k) kind_of(state, k).assign(std::size_t(want.size()), 0.f);
    for (const PlannedRead& r : plan) execute(r, reader, ps, kind_of(state, r.k), want.begin);
    const std::string bad = first_nonfinite(state.view(), ps);
    DIT_CHECK(bad.empty(), dir, ": ", bad, " holds NaN or Inf values (dit_mp inspect lists them): expected finite "
              "state; start from an earlier checkpoint");
  });
  // Ranks resolve a root on their own; a save racing with the load could make them disagree.
  const double hi = ctx.world->all_reduce_max(double(meta.step));
  const double lo = -ctx.world->all_reduce_max(-double(meta.step));
  DIT_CHECK(hi == lo, path, ": ranks loaded different steps (", lo, " and ", hi,
            "); was a checkpoint being written?");
  return meta;
}

CheckpointMeta read_checkpoint_meta(const std::string& path) {
  const std::string dir = step_dir(path);
  return read_meta(open_index(dir), dir);
}

DiTConfig read_checkpoint_model(const std::string& path) {
  return h5::read_model_config(open_index(step_dir(path)), h5::LaterFields::Required, "the model config");
}

std::string latest_checkpoint(const std::string& root) {
  std::error_code ec;
  const fs::path r(root);
  if (!fs::is_directory(r, ec)) return "";
  {
    std::string name = read_regular((r / kLatestFile).string(), "the checkpoint pointer").substr(0, 63);
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    if (parse_step(name) >= 0 && is_complete(r / name)) return (r / name).string();
  }
  std::int64_t best = -1;
  fs::path best_path;
  for (const auto& e : fs::directory_iterator(r, ec)) {
    const std::int64_t s = parse_step(e.path().filename().string());
    if (s > best && e.is_directory(ec) && is_complete(e.path())) best = s, best_path = e.path();
  }
  return best >= 0 ? best_path.string() : "";
}

std::vector<std::string> complete_checkpoints(const std::string& root) {
  std::map<std::int64_t, std::string, std::greater<>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::int64_t s = parse_step(e.path().filename().string());
    if (s >= 0 && e.is_directory(ec) && is_complete(e.path())) found[s] = e.path().string();
  }
  std::vector<std::string> out;
  for (const auto& [s, p] : found) out.push_back(p);
  return out;
}

CheckpointMeta load_newest_checkpoint(const std::string& root, const DiTConfig& cfg, const ParamSet& ps,
                                      ParallelContext& ctx, StageState& state,
                                      std::vector<std::string>& skipped, std::optional<FlatRange> range) {
  const std::vector<std::string> dirs = complete_checkpoints(root);
  std::string newest_error;
  int origin = 0;
  for (const std::string& dir : dirs) {
    try {
      return load_checkpoint(dir, cfg, ps, ctx, state, range);
    } catch (const AgreedError& e) {  // every rank is here: the next candidate is tried together
      skipped.push_back(dir + ": " + e.what());
      if (newest_error.empty()) newest_error = e.what(), origin = e.origin_rank();
    }
  }
  if (!dirs.empty())
    throw AgreedError("none of the " + std::to_string(dirs.size()) + " checkpoints under " + root +
                          " loads; the newest: " + newest_error,
                      origin);
  CheckpointMeta none;
  none.step = -1;
  return none;
}

std::string inspect_checkpoint(const std::string& path) {
  const std::string dir = step_dir(path);
  const h5::File index = open_index(dir);
  const CheckpointMeta meta = read_meta(index, dir);
  const DiTConfig cfg = h5::read_model_config(index, h5::LaterFields::Required, "the model config");
  const std::vector<ParamSpec> specs = DiTStage::declare(cfg, StageLayout::whole(cfg));
  std::ostringstream os;
  os << "checkpoint " << dir << "\n"
     << "  step " << meta.step << ", format " << meta.format_version << ", written at "
     << meta.layout.str() << ", seed " << meta.seed << ", loss scale " << meta.loss_scale << " ("
     << meta.loss_scale_clean_steps << " clean steps, " << meta.skipped_steps << " skipped), run "
     << (meta.run_id.empty() ? "(no id: written before run ids)" : meta.run_id) << "\n"
     << "  model: input_size " << cfg.input_size << ", patch_size " << cfg.patch_size
     << ", in_channels " << cfg.in_channels << ", hidden_size " << cfg.hidden_size << ", depth "
     << cfg.depth << ", num_heads " << cfg.num_heads << ", mlp_ratio " << cfg.mlp_ratio
     << ", num_classes " << cfg.num_classes << ", learn_sigma " << cfg.learn_sigma << " ("
     << cfg.num_params() << " parameters)\n";
  std::size_t width = 0;
  for (const ParamSpec& s : specs) width = std::max(width, s.name.size());
  os << "  tensors (" << specs.size() << " x " << std::size(kKinds)
     << " kinds: model, ema, exp_avg, exp_avg_sq; global shape, shard pieces):\n";
  ckpt::ShardReader reader(dir, index);
  std::set<std::pair<std::string, std::string>> verified;
  std::int64_t nonfinite[4] = {0, 0, 0, 0};
  std::vector<std::string> bad;  // tensors holding NaN or Inf
  for (const ParamSpec& s : specs) {
    std::size_t pieces = 0;
    for (int k = 0; k < 4; ++k) {
      const std::string name = join(kKinds[k], s.name);
      const auto maps = ckpt::read_mappings(index, name, s.global);
      if (k == 0) pieces = maps.size();
      for (const ckpt::Mapping& m : maps)
        if (verified.insert({m.file, m.dataset}).second) {
          const std::int64_t n = reader.verify(m.file, m.dataset, name);
          if (n > 0 && (bad.empty() || bad.back().rfind(name + " ", 0) != 0)) bad.push_back(name + " (" + m.file);
          else if (n > 0) bad.back() += ", " + m.file;
          nonfinite[k] += n;
        }
    }
    os << "    " << std::left << std::setw(int(width)) << s.name << "  " << std::setw(14)
       << s.global.str() << " " << pieces << (pieces == 1 ? " piece" : " pieces") << "\n";
  }
  std::set<std::string> known;
  for (const ParamSpec& s : specs) known.insert(s.name);
  for (const char* kind : kKinds)
    for (const std::string& n :
         index.exists(kind) ? index.members(kind) : std::vector<std::string>{})
      if (!known.count(n)) os << "  note: " << kind << "/" << n << " is not part of the model\n";
  std::set<std::string> files;
  for (const auto& [file, ds] : verified) files.insert(file);
  std::uintmax_t bytes = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) bytes += e.file_size();
  os << "  verified " << verified.size() << " datasets in " << files.size()
     << " shard files: checksums OK; " << bytes << " bytes in the folder\n";
  std::string names;
  for (std::size_t i = 0; i < bad.size() && i < 8; ++i) names += (i ? "; " : "") + bad[i] + ")";
  if (bad.size() > 8) names += "; and " + std::to_string(bad.size() - 8) + " more";
  DIT_CHECK(bad.empty(), dir, ": ", bad.size(), " tensors hold NaN or Inf values (", nonfinite[0], " in model, ",
            nonfinite[1], " in ema, ", nonfinite[2] + nonfinite[3], " in the Adam moments): ", names,
            "; expected finite values: this checkpoint cannot be resumed");
  os << "  resolved config:\n";
  std::istringstream toml(meta.config_toml);
  for (std::string line; std::getline(toml, line);) os << "    " << line << "\n";
  return os.str();
}

}  // namespace dit

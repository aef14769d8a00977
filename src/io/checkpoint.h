// Sharded HDF5 checkpoints: each rank writes the tensors it is assigned to its own shard file,
// rank 0 then writes index.h5 with one virtual dataset (VDS) per global tensor and state kind, so
// any layout can load any checkpoint (resharding is ordinary loading) and h5py sees plain tensors.
// Works on host flat buffers; knows nothing of the trainer. Files are untrusted input.
//
// Folder of one checkpoint (format version 1):
//   <root>/step_00001000/
//     shard_tp{t}_pp{p}_dp{d}.h5   model/<name>, ema/<name>, exp_avg/<name>, exp_avg_sq/<name>:
//                                  the LOCAL tp slice (local shape, float32, chunked, Fletcher32)
//                                  of the tensors this rank was assigned: those whose first
//                                  element lies in its ZeRO shard of the stage's flat buffer
//                                  (checkpoint_tensors); tensors replicated over tp only by tp
//                                  rank 0. Which rank wrote what is the index's business: a
//                                  reader follows its mappings. Root attrs: format_version, step,
//                                  layout [tp, pp, dp], coord [tp, pp, dp].
//     index.h5                     model/<name> ... exp_avg_sq/<name>: virtual datasets of the
//                                  GLOBAL shape mapping blocks of the tensor to the shard datasets
//                                  (relative file names, so the folder can move); NaN where a
//                                  source is missing. Root attrs: format_version, step, layout,
//                                  seed (uint64), loss_scale, config_toml, run_id (the run that
//                                  wrote it; absent before run ids). Group /config: the
//                                  DiTConfig as attributes (the schema of weights files).
//     COMPLETE                     written last, before the folder is renamed into place: the
//                                  step and the size and CRC-32 of index.h5, checked before HDF5
//                                  opens the index (see checkpoint_manifest.h)
//   <root>/latest                  "step_00001000": the newest checkpoint (written atomically)
// A dataset of index.h5 may also be a plain (non-virtual) dataset: it then holds the tensor itself
// (for converted weights).
//
// Loading does not read through the VDS: HDF5 1.10.8 does check the Fletcher32 sums of the
// sources when reading through a VDS, but a missing or truncated source file silently reads as
// the fill value, and its errors name neither file nor tensor. The loader therefore reads the
// VDS's own mapping list, checks that it covers every tensor exactly once, and reads each piece
// from its shard file directly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "layers/dit_config.h"
#include "layers/params.h"
#include "parallel/grid.h"

namespace dit {

inline constexpr int kCheckpointFormatVersion = 1;

// Flat elements [begin, begin + size) of one (tp, pp) stage's local state on the host, each in the
// ParamSet's flat order: the whole stage (begin 0, padded_numel() long; the padding is written as
// nothing and loaded as zeros), or the part one rank saves or loads.
struct StageState;
// The same, borrowed: each kind's values of flat elements [begin, begin + size) (model, ema,
// exp_avg, exp_avg_sq: ckpt::kKinds' order), e.g. the optimizer's own host buffers; and `tail`,
// the values that follow them (those of a tensor running past a borrowed shard, gathered), or none.
struct StateView {
  std::int64_t begin = 0;
  const float* kinds[4] = {nullptr, nullptr, nullptr, nullptr};
  std::int64_t sizes[4] = {0, 0, 0, 0};  // each kind's values (a save refuses unequal ones)
  const StageState* tail = nullptr;      // starts at begin + sizes[0]
  FlatRange range() const;
  // Kind k's values of flat elements [a, b) inside range(): a pointer into the view, or, for
  // elements on both sides of the tail's start, into `scratch`, where they are copied.
  const float* values(int k, std::int64_t a, std::int64_t b, std::vector<float>& scratch) const;
};
struct StageState {
  std::int64_t begin = 0;
  std::vector<float> model, ema, exp_avg, exp_avg_sq;
  FlatRange range() const { return {begin, begin + static_cast<std::int64_t>(model.size())}; }
  StateView view() const {
    const auto n = [](const std::vector<float>& v) { return static_cast<std::int64_t>(v.size()); };
    return {begin, {model.data(), ema.data(), exp_avg.data(), exp_avg_sq.data()}, {n(model), n(ema), n(exp_avg), n(exp_avg_sq)}};
  }
};

// The tensors of `ps` dp rank `dp_rank` of `dp` writes to its shard file: those whose first
// element lies in its ZeRO shard of the flat buffer (a tensor replicated over tp from tp rank 0
// only), so each rank writes about its own shard. And the flat range they span ({0, 0}: none).
std::vector<int> checkpoint_tensors(const ParamSet& ps, int dp, int dp_rank);
FlatRange checkpoint_range(const ParamSet& ps, int dp, int dp_rank);

struct CheckpointMeta {
  std::int64_t step = 0;    // steps completed
  std::string config_toml;  // the resolved run config
  Layout layout;            // layout that wrote it (on save: ctx.layout is written)
  std::uint64_t seed = 0;
  double loss_scale = 1.0;                        // fp16 dynamic loss scale
  std::int64_t loss_scale_clean_steps = 0;        // fp16: clean steps since the scale last changed
  bool loss_scaling = false;                      // written by an fp16 run (the scale is live)
  std::int64_t skipped_steps = 0;                 // steps skipped for fp16 overflow (AdamW's count
                                                  // is step - skipped_steps)
  std::string run_id;  // the run that wrote it (run.id, index attr run_id); "" when written before run ids
  int format_version = kCheckpointFormatVersion;  // on save: always the current version
  std::string dir;                                // on load: the step folder it came from
};

// Collective over ctx.world. Writes <root>/step_<8 digits>/ under a temporary name
// (<root>/.tmp-step_...), renames it into place, then updates <root>/latest atomically. Keeps
// the newest `keep` complete checkpoints (keep <= 0: all): older steps are pruned only after the
// new one is in place; folders of LATER steps (an abandoned run) are never pruned. Each rank's
// `state` covers at least checkpoint_range of its dp rank (the whole stage does too).
// Errors are agreed: every rank throws the same message. Returns the step folder.
std::string save_checkpoint(const std::string& root, const CheckpointMeta& meta,
                            const DiTConfig& cfg, const ParamSet& ps, ParallelContext& ctx,
                            const StateView& state, int keep);
inline std::string save_checkpoint(const std::string& root, const CheckpointMeta& meta, const DiTConfig& cfg,
                                   const ParamSet& ps, ParallelContext& ctx, const StageState& state, int keep) {
  return save_checkpoint(root, meta, cfg, ps, ctx, state.view(), keep);
}

// Collective over ctx.world. `path` is a step folder, or a root (then the newest complete
// checkpoint, see latest_checkpoint). Validates the format version, the model config against
// `cfg` (the error lists every difference: "depth 4 vs 6, hidden_size 64 vs 96"), and that every
// tensor of `ps` exists with its global shape and is fully covered by the index's mappings, before
// sizing `state` to `range` of the flat buffer (the whole stage by default); then reads that range
// of this rank's tp slices at ITS layout. A corrupt, truncated or missing shard fails with a
// message naming the file and the tensor. Errors are agreed over ctx.world.
CheckpointMeta load_checkpoint(const std::string& path, const DiTConfig& cfg, const ParamSet& ps,
                               ParallelContext& ctx, StageState& state, std::optional<FlatRange> range = {});

// Not collective: the metadata and the model config of a checkpoint (step folder or root), e.g.
// to build the model before loading it.
CheckpointMeta read_checkpoint_meta(const std::string& path);
DiTConfig read_checkpoint_model(const std::string& path);

// The step folder <root>/latest names if it is complete, else the complete step folder of the
// highest step (a save that died before updating `latest`); "" if none.
std::string latest_checkpoint(const std::string& root);

// Every complete step folder under `root`, newest step first.
std::vector<std::string> complete_checkpoints(const std::string& root);

// `--resume auto`: loads the newest complete checkpoint under `root` that verifies, as
// load_checkpoint does; each newer one that fails is appended to `skipped` as "<dir>: <why>".
// Throws (agreed) when checkpoints exist but none loads, naming the newest's problem; returns a
// meta with step -1 when there is none.
CheckpointMeta load_newest_checkpoint(const std::string& root, const DiTConfig& cfg, const ParamSet& ps,
                                      ParallelContext& ctx, StageState& state,
                                      std::vector<std::string>& skipped, std::optional<FlatRange> range = {});

// For `dit_mp inspect`: step, layout, model, tensors and shapes; reads every shard dataset fully
// to verify its checksum. Returns a printable report; throws naming the file and tensor on
// corruption.
std::string inspect_checkpoint(const std::string& path);

}  // namespace dit

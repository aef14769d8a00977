// ZeRO over data-parallel ranks: each dp rank owns 1/dp of a stage's flat parameter range (its
// shard) and keeps the fp32 master weights, Adam moments and EMA of that shard only (level 1).
// Level 2 also shards the gradients: each bucket's (consecutive units - embedders, a block, the
// final layer: layers/dit_stage.h - whose gradients fit bucket_bytes together) are reduced to their
// owners as soon as the step's last backward has produced them all, and their full-gradient pages
// are handed back. Level 3 also shards the parameters: a unit's
// are gathered from their owners just before its forward and again before its backward, and
// handed back after; a rank keeps only its shard between uses.
//
// A step:
//   1. the gradients' sum over dp reaches each shard's owner (levels 2, 3: bucket by bucket during
//      the backward; level 1: the same with overlap, else all of them after it). Every level sums alike: each owner adds the dp
//      ranks' values in rank order, in messages of at most bucket_bytes, fp32 or (reduce_dtype
//      BF16) bf16 on the wire and fp32 in the sum; so levels, buckets and timing change no bit;
//   2. global grad norm of the mean over dp replicas, unscaled by the fp16 loss scale: one sum of
//      squares over the shard's counted ranges (tensors replicated over tp count on tp rank 0
//      only), summed over dp, tp and pp; the clipping factor;
//   3. AdamW and EMA on the shard in one fused pass (which also refreshes 16-bit parameters from
//      the fp32 masters), AdamW reading each gradient times 1/(dp x loss scale) x clip; with fp16
//      loss scaling a non-finite norm skips this step on every rank;
//   4. levels 1, 2: all-gather the updated parameters over dp (level 3 gathers each unit at its use).
//      With overlap, each bucket's gather is posted here and waited for by the next forward of its
//      first unit (enter), so the next step's forward runs while later buckets are still on their way; whatever
//      reads the parameters otherwise calls settle() first (the Trainer's model(), state() and
//      restore() do). The bits are those of the all-gather: each owner's part is copied.
#pragma once

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "layers/dit_stage.h"
#include "optim/adamw.h"
#include "parallel/grid.h"

namespace dit {

struct ZeroOptions {
  int level = 1;  // 1: optimizer state sharded; 2: and gradients; 3: and parameters
  DType reduce_dtype = DType::F32;
  // The largest gradient message (fp32 elements x 4), and how many consecutive units' gradients
  // are reduced (and parameters gathered) together.
  std::size_t bucket_bytes = std::size_t{25} << 20;
  // Communication behind compute: each bucket's gradients are reduced while the backward goes on
  // (level 1 too), and level 3 fetches the next unit's parameters while the current one runs.
  bool overlap = true;
  // The optimizer state (fp32 master, Adam moments, EMA) and the reduced gradients of the shard in
  // host memory, AdamW on the host, a bucket of gradients at a time (optim.offload = "cpu").
  bool offload = false;
  // Elements of the shard the gradient norm's kernel sums at once (its offsets are int32): a shard
  // of more is summed in parts. Tests set it small.
  std::int64_t norm_part = std::int64_t{1} << 30;
};

// The pages of one flat buffer that someone holds, counted: a page nobody holds any more is handed
// back to the backend (Allocator::release_pages) and reads as zeros when next touched. A trailing
// partial page shares its allocation's rounding and is always held. A backend that cannot hand
// pages back (Allocator::can_release_pages) is left alone. The bytes held are counted
// per range (Held), so the count does not depend on where pages fall.
class PageHolds {
 public:
  PageHolds() = default;
  PageHolds(Backend& be, const Tensor& flat);
  void hold(FlatRange r);
  void drop(FlatRange r);
  void drop_unheld();  // hands back every page nobody holds

 private:
  std::int64_t first_page(FlatRange r) const;
  std::int64_t end_page(FlatRange r) const;
  Backend* be_ = nullptr;
  char* base_ = nullptr;
  std::size_t elem_ = 0, page_ = 0;
  std::vector<int> count_;
};

// Bytes held now and at most: the accounting of ZeRO-2/3.
struct Held {
  std::size_t now = 0, peak = 0;
  void add(std::size_t b) { peak = std::max(peak, now += b); }
  void sub(std::size_t b) { now -= b; }
};

// Posts the gather of flat elements r of `flat`, sharded over dp in parts of `shard` elements (rank
// o owns [o shard, (o + 1) shard)): each owner's part sent to every other rank, the others' received
// in place. Every rank of dp posts the same r; the requests complete it.
std::vector<Request> post_range_gather(Comm& dp, const Tensor& flat, FlatRange r, std::int64_t shard, int tag);

// A flat parameter buffer sharded over dp by units (ZeRO-3's parameters, or a frozen distillation
// teacher's): each rank keeps its shard; a unit's values are gathered from their owners as a pass
// enters it and handed back when no pass uses it any more. With `prefetch`, the unit a pass runs
// next is fetched while the current one runs (one more unit held). Forward and backward alike: no
// gradients are kept here.
class UnitGather final : public UnitResidency {
 public:
  UnitGather() = default;
  // `units` tile the flat buffer, a multiple of dp long; `tag` is this gather's on the dp
  // communicator (two gathers in flight at once must differ).
  UnitGather(Backend& be, const Tensor& flat, Comm& dp, std::vector<FlatRange> units, bool prefetch, int tag);
  void enter(int unit, Pass pass, int next) override;
  void leave(int unit, Pass pass) override;
  void gradients_final(int) override {}
  // Hands back every page no unit in use holds (after the buffer was written whole, e.g. loaded).
  void hand_back() { pages_.drop_unheld(); }
  FlatRange kept() const { return kept_; }
  // The most bytes held at once: the shard and what each gathered unit adds to it (a unit is
  // gathered in place, so its part in the shard is the shard's memory). The most of any dp rank:
  // units and shards align differently on each, and every rank reports the same, as plan does.
  std::size_t peak_bytes() const;

 private:
  std::vector<Request> post(int unit) const;
  std::size_t added_bytes(int unit, int rank) const;  // a unit's bytes outside dp rank `rank`'s shard
  void count(int unit, bool held);                    // a hold or a drop, in every dp rank's count
  void hold(int unit);
  Comm* dp_ = nullptr;
  Tensor flat_;
  std::vector<FlatRange> units_;
  FlatRange kept_;
  bool prefetch_ = false;
  int tag_ = 0;
  std::vector<int> users_;                      // passes using a unit's values now (and a fetch)
  std::vector<std::vector<Request>> fetching_;  // prefetch: a unit's values on their way
  PageHolds pages_;
  std::vector<Held> held_;  // per dp rank, as if this rank were it (the passes are the same on all)
};

class ZeroOptimizer final : public UnitResidency {
 public:
  // The ParamSet must be padded to a multiple of dp (DiTStage's pad_multiple). `units` tile the
  // flat buffers (DiTStage::units); levels 2 and 3 need them.
  ZeroOptimizer(Backend& be, ParamSet& ps, ParallelContext& ctx, ZeroOptions options = {},
                std::vector<FlatRange> units = {});
  ~ZeroOptimizer() override;
  ZeroOptimizer(const ZeroOptimizer&) = delete;
  ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;

  struct Result {
    double grad_norm = 0;  // global norm before clipping, of the unscaled gradients
    bool applied = true;   // false: skipped (non-finite gradients under loss scaling)
  };
  // max_norm <= 0: no clipping. The grads hold d(loss_scale x loss); NonFinite::Skip (fp16 loss
  // scaling) leaves params, moments and EMA untouched when any gradient is inf or NaN; Discard (the
  // step's loss was not finite) measures the norm and leaves them untouched whatever it is.
  enum class NonFinite : std::uint8_t { Apply, Skip, Discard };
  Result step(const AdamWConfig& cfg, double lr, std::int64_t step_number, double max_norm,
              double ema_decay, double loss_scale = 1.0, NonFinite nonfinite = NonFinite::Apply);

  // UnitResidency: what a stage's units need while they run (levels 2, 3 with dp > 1; otherwise
  // every parameter and gradient stays and these do nothing).
  void enter(int unit, Pass pass, int next) override;
  void leave(int unit, Pass pass) override;
  void gradients_final(int unit) override;
  // Before a step's backward: the gradient buffer reads zero (levels 2, 3: it already does).
  void zero_grads();
  // Every parameter this rank holds is up to date: the step's gathers still in flight (levels 1, 2
  // with overlap) are waited for.
  void settle();
  // Levels 1, 2: every rank's shard of the parameters to every rank (after each wrote its own, as a
  // restore does); level 3 keeps the shard alone. Collective over dp.
  void gather_values();
  // Where the gradient of flat element 0 waits for step(), every reduction done: a test's fault point.
  Tensor first_gradient();

  // The flat elements dp rank `rank` of `dp` owns in a buffer of `padded` (a multiple of dp) elements.
  static FlatRange shard_range(std::int64_t padded, int dp, int rank) {
    return {rank * (padded / dp), (rank + 1) * (padded / dp)};
  }
  int level() const { return options_.level; }
  Optimizer& shard() { return *opt_; }
  const Optimizer& shard() const { return *opt_; }
  std::int64_t shard_begin() const { return begin_; }
  std::int64_t shard_size() const { return end_ - begin_; }
  // Bytes of optimizer state this rank holds in host memory (offloaded: the master, Adam moments,
  // EMA, the staging of a bucket and, at dp > 1 without a transport's reduce-scatter, the reduced
  // gradients of the shard; otherwise none).
  std::size_t host_bytes() const {
    return options_.offload ? opt_->bytes() + (grads_on_host_ ? shard_grads_.bytes() : 0) : 0;
  }
  // Bytes of optimizer state this rank holds, wherever (master if separate, exp_avg, exp_avg_sq, EMA).
  std::size_t state_bytes() const {
    const bool separate = options_.offload || be_->compute_dtype() != DType::F32;
    return static_cast<std::size_t>(end_ - begin_) * 4 * (separate ? 4 : 3);
  }
  bool offloaded() const { return options_.offload; }
  // The most bytes of the flat parameter buffer this rank held at once (level 3: the shard and
  // the gathered units beyond it, UnitGather::peak_bytes; otherwise all of it).
  std::size_t param_bytes() const;
  // The same of the gradients: the units' held at once (levels 2, 3) or all of the flat buffer,
  // the reduced shard (unless offloaded) and the reduction's staging buffers.
  std::size_t grad_bytes() const;

 private:
  bool sharded_values() const { return options_.level >= 3 && dp_ > 1; }
  bool sharded_grads() const { return options_.level >= 2 && dp_ > 1; }
  // Units are reduced as their gradients become final (levels 2, 3, or overlap), not after the step.
  bool early_reduce() const {
    return dp_ > 1 && !collective_ && !units_.empty() && (options_.level >= 2 || options_.overlap);
  }
  // Levels 1, 2 with overlap: the step's all-gather is posted bucket by bucket, for the next forward.
  bool gathers_behind_forward() const {
    return dp_ > 1 && !collective_ && !units_.empty() && !sharded_values() && options_.overlap;
  }
  // A dp communicator whose sends do not reach every rank (NCCL): level 1 alone, its reduction the
  // transport's reduce-scatter after the backward (its own summation order) and its all-gather.
  bool collective_ = false;
  void reduce_collective();
  // One round of the dp sum of flat gradient elements [r.begin, r.end) into the owners'
  // shard_grads_: the k-th piece of each owner's part, posted; finish() completes it.
  struct Round {
    int bucket = -1;              // the bucket whose reduction it ends, or -1
    std::int64_t x = 0, n = 0;    // this rank's piece, summed when it has arrived
    std::vector<Request> requests;
  };
  std::int64_t rounds(FlatRange r) const;
  Round post_round(FlatRange r, std::int64_t k);
  void finish(Round& round);
  void reduce_now(FlatRange r);
  // Levels 2, 3 and overlap: bucket b's reduction, its last round left in flight under overlap.
  void reduce_bucket(int b);
  void finish_pending();  // the round in flight, and then its bucket's gradient pages
  void reduce_all();      // every reduction of the step done
  bool reduced_all_ = false;
  // Sums the dp ranks' pieces of shard elements [x, x + n) (flat offsets) in rank order.
  void sum_piece(std::int64_t x, std::int64_t n);
  void hold_grads(int unit);  // unit's gradient pages, until it is reduced
  void progress();            // lets what is in flight advance
  Tensor staging(int slot, std::int64_t n) const;

  Backend* be_;
  ParamSet* ps_;
  ParallelContext* ctx_;
  ZeroOptions options_;
  int dp_, rank_;
  std::int64_t begin_, end_;
  std::int64_t piece_ = 0;  // elements per gradient message
  // offload: the backend of the host's memory and AdamW (declared before the buffers it holds)
  std::unique_ptr<Backend> host_;
  Buffer shard_grads_;      // dp > 1: the reduced gradients of the shard (in host memory if grads_on_host_)
  bool grads_on_host_ = false;
  Buffer sum_;              // grads_on_host_: one piece summed on the backend on its way down
  Backend& grads_backend() const { return grads_on_host_ ? *host_ : *be_; }  // where shard_grads_ is
  Buffer recv_;             // dp > 1: (dp - 1) pieces as they arrive, in the wire dtype
  Buffer wire_, widen_;     // bf16 reduction: dp pieces in bf16 (sent, and our own), one in fp32
  std::unique_ptr<Optimizer> opt_;
  Buffer counted_;  // (R, 2) int32 [begin, end) ranges in the norm, relative to their part
  std::int64_t counted_ranges_ = 0;
  struct NormPart {
    std::int64_t begin, end;     // shard elements the part covers
    std::int64_t first, ranges;  // its rows of counted_
  };
  std::vector<NormPart> norm_parts_;
  std::vector<FlatRange> units_;
  // Consecutive units whose gradients together fit a bucket (a larger unit alone): reduced in one
  // go once all their gradients are final, and their updated parameters gathered in one go (levels
  // 1, 2 with overlap), as Megatron's buckets; a small model is then one message, not one a unit.
  struct Bucket {
    int first = 0, end = 0;  // units [first, end)
    FlatRange range;
  };
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;  // a unit's bucket
  Round pending_;                         // overlap: the gradient round in flight
  std::vector<std::vector<Request>> fetching_;  // levels 1, 2 with overlap: a bucket's updated parameters on their way
  UnitGather values_;                     // level 3: the parameters
  std::vector<char> grads_held_, final_;  // this step's state of each unit's gradients (held: levels 2, 3)
  PageHolds grads_;
  Held grads_bytes_;  // what the accounting reports (levels 2, 3)
};

}  // namespace dit

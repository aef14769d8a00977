// ZeRO levels 1-3 over data-parallel ranks (see zero.h).
#include "optim/zero.h"

#include "backend/virtual/virtual_backend.h"

#include <algorithm>
#include <cmath>
#include <exception>

namespace dit {

namespace {
constexpr int kReduceTag = 29, kGatherTag = 31;  // gradient pieces and parameter parts on the dp communicator
std::size_t bytes_of(const Tensor& flat, FlatRange r) {
  return static_cast<std::size_t>(r.end - r.begin) * dtype_size(flat.dtype);
}
void check_tiling(const std::vector<FlatRange>& units, std::int64_t n) {
  std::int64_t at = 0;
  for (const FlatRange& u : units) {
    DIT_CHECK(u.begin == at && u.end > u.begin, "ZeRO: the units do not tile the flat buffer at element ", at);
    at = u.end;
  }
  DIT_CHECK(at == n, "ZeRO: the units end at ", at, " of ", n, " elements");
}
}  // namespace

// ---- PageHolds -------------------------------------------------------------------------------

PageHolds::PageHolds(Backend& be, const Tensor& flat)
    : be_(&be), base_(static_cast<char*>(flat.data)), elem_(dtype_size(flat.dtype)), page_(be.page_bytes()) {
  if (!be.can_release_pages()) return;  // nothing to hand back (the planner's backend): no pages to count
  const std::size_t bytes = flat.bytes();
  count_.assign((bytes + page_ - 1) / page_, 0);
  if (bytes % page_ != 0) count_.back() = 1;  // the trailing partial page stays
}

std::int64_t PageHolds::first_page(FlatRange r) const {
  return static_cast<std::int64_t>(static_cast<std::size_t>(r.begin) * elem_ / page_);
}
std::int64_t PageHolds::end_page(FlatRange r) const {
  return static_cast<std::int64_t>((static_cast<std::size_t>(r.end) * elem_ + page_ - 1) / page_);
}

void PageHolds::hold(FlatRange r) {
  if (count_.empty()) return;
  for (std::int64_t p = first_page(r); p < end_page(r); ++p) ++count_[p];
}

void PageHolds::drop(FlatRange r) {
  if (count_.empty()) return;
  const std::int64_t end = end_page(r);
  std::int64_t run = -1;  // the first page of a run that nobody holds now
  for (std::int64_t p = first_page(r); p <= end; ++p) {
    const bool gone = p < end && --count_[p] == 0;
    if (gone && run < 0) run = p;
    if (!gone && run >= 0) {
      be_->release_pages(base_ + run * page_, static_cast<std::size_t>(p - run) * page_);
      run = -1;
    }
  }
}

void PageHolds::drop_unheld() {
  const std::int64_t pages = static_cast<std::int64_t>(count_.size());
  std::int64_t run = -1;
  for (std::int64_t p = 0; p <= pages; ++p) {
    const bool free = p < pages && count_[p] == 0;
    if (free && run < 0) run = p;
    if (!free && run >= 0) {
      be_->release_pages(base_ + run * page_, static_cast<std::size_t>(p - run) * page_);
      run = -1;
    }
  }
}

// ---- UnitGather ------------------------------------------------------------------------------

std::vector<Request> post_range_gather(Comm& dp, const Tensor& flat, FlatRange r, std::int64_t shard, int tag) {
  std::vector<Request> requests;
  const int me = dp.rank();
  for (int o = static_cast<int>(r.begin / shard); o <= static_cast<int>((r.end - 1) / shard); ++o) {
    const std::int64_t x = std::max(r.begin, o * shard), y = std::min(r.end, (o + 1) * shard);
    const Tensor part = flat.rows(x, y - x);
    if (o != me) {
      requests.push_back(dp.irecv(part, o, tag));
      continue;
    }
    for (int q = 0; q < dp.size(); ++q)
      if (q != me) requests.push_back(dp.isend(part, q, tag));
  }
  return requests;
}

UnitGather::UnitGather(Backend& be, const Tensor& flat, Comm& dp, std::vector<FlatRange> units, bool prefetch,
                       int tag)
    : dp_(&dp), flat_(flat), units_(std::move(units)), prefetch_(prefetch), tag_(tag),
      users_(units_.size(), 0), fetching_(units_.size()), pages_(be, flat) {
  const std::int64_t n = flat.numel();
  DIT_CHECK(n % dp.size() == 0, "ZeRO: a parameter buffer of ", n, " elements is not padded to a multiple of dp = ",
            dp.size());
  check_tiling(units_, n);
  kept_ = {dp.rank() * (n / dp.size()), (dp.rank() + 1) * (n / dp.size())};
  pages_.hold(kept_);  // the shard stays (ZeRO-3: the optimizer updates it in place)
  pages_.drop_unheld();
  held_.assign(static_cast<std::size_t>(dp.size()), Held{});
  for (Held& h : held_) h.add(bytes_of(flat, kept_));
}

std::vector<Request> UnitGather::post(int unit) const {
  return post_range_gather(*dp_, flat_, units_[unit], kept_.end - kept_.begin, tag_);
}

std::size_t UnitGather::added_bytes(int unit, int rank) const {
  const FlatRange u = units_[unit];
  const std::int64_t shard = kept_.end - kept_.begin;
  const FlatRange shared{std::max(u.begin, rank * shard), std::min(u.end, (rank + 1) * shard)};
  return bytes_of(flat_, u) - (shared.begin < shared.end ? bytes_of(flat_, shared) : 0);
}

void UnitGather::count(int unit, bool held) {
  for (int q = 0; q < static_cast<int>(held_.size()); ++q) {
    if (held)
      held_[q].add(added_bytes(unit, q));
    else
      held_[q].sub(added_bytes(unit, q));
  }
}

void UnitGather::hold(int unit) {
  pages_.hold(units_[unit]);
  count(unit, true);
}

std::size_t UnitGather::peak_bytes() const {
  std::size_t peak = 0;
  for (const Held& h : held_) peak = std::max(peak, h.peak);
  return peak;
}

void UnitGather::enter(int unit, Pass, int next) {
  std::vector<Request>& fetched = fetching_.at(unit);
  if (!fetched.empty()) {  // fetched ahead: that fetch's hold is this pass's
    for (Request& q : fetched) dp_->wait(q);
    fetched.clear();
  } else if (users_.at(unit)++ == 0) {
    hold(unit);
    for (Request& q : post(unit)) dp_->wait(q);
  }
  if (prefetch_ && next >= 0 && users_.at(next) == 0) {
    users_[next] = 1;
    hold(next);
    fetching_[next] = post(next);
  }
  dp_->progress();
}

void UnitGather::leave(int unit, Pass) {
  if (--users_.at(unit) == 0) {
    pages_.drop(units_[unit]);
    count(unit, false);
  }
  dp_->progress();
}

// ---- ZeroOptimizer ---------------------------------------------------------------------------

ZeroOptimizer::ZeroOptimizer(Backend& be, ParamSet& ps, ParallelContext& ctx, ZeroOptions options,
                             std::vector<FlatRange> units)
    : be_(&be), ps_(&ps), ctx_(&ctx), options_(options), dp_(ctx.dp->size()), rank_(ctx.dp->rank()),
      units_(std::move(units)) {
  const DType wire = options.reduce_dtype;
  DIT_CHECK(wire == DType::F32 || wire == DType::BF16, "ZeRO: gradients are reduced in fp32 or bf16, not ",
            dtype_name(wire));
  DIT_CHECK(options.level >= 1 && options.level <= 3, "ZeRO level ", options.level, ": expected 1, 2 or 3");
  DIT_CHECK(options.bucket_bytes >= 4, "ZeRO: a bucket of ", options.bucket_bytes, " bytes holds no gradient");
  DIT_CHECK(ps.padded_numel() % dp_ == 0, "ZeRO: a parameter buffer of ", ps.padded_numel(),
            " elements is not padded to a multiple of dp = ", dp_);
  collective_ = dp_ > 1 && !ctx.dp->sends_to_any_rank();
  DIT_CHECK(!collective_ || options.level == 1, "optim.zero = ", options.level, ": the data-parallel communicator ",
            "(NCCL) sends between pipeline neighbours only; levels 2 and 3 reduce and gather between any two ",
            "ranks: expected optim.zero = 1");
  const std::int64_t shard = ps.padded_numel() / dp_;
  begin_ = shard_range(ps.padded_numel(), dp_, rank_).begin;
  end_ = begin_ + shard;
  piece_ = std::max<std::int64_t>(1, std::min<std::int64_t>(shard, static_cast<std::int64_t>(options.bucket_bytes / 4)));
  if (options.offload)  // planned on the planning backend: the host's memory is planned too, never allocated
    host_ = be.device() == Device::Virtual ? std::make_unique<VirtualBackend>(be.compute_dtype())
                                           : make_backend("cpu", be.compute_dtype());
  // Offloaded, the reduced gradients of the shard live in host memory too (ZeRO-Offload): each
  // piece is summed on the backend (or by the transport's reduce-scatter) and goes down as it is
  // reduced.
  grads_on_host_ = options.offload && dp_ > 1;
  if (dp_ > 1) {
    const std::size_t shard_bytes = static_cast<std::size_t>(shard) * dtype_size(ParamSet::kGradDType);
    shard_grads_ = grads_on_host_ ? Buffer(*host_, shard_bytes) : Buffer(be, shard_bytes);
    if (grads_on_host_ && !collective_)  // sum_piece's sum, on its way down
      sum_ = Buffer(be, static_cast<std::size_t>(piece_) * dtype_size(ParamSet::kGradDType));
    recv_ = Buffer(be, static_cast<std::size_t>((dp_ - 1) * piece_) * dtype_size(wire));
    // bf16 on the wire, or a transport's reduce-scatter a piece at a time into a shard in host
    // memory: dp pieces gathered for it; bf16 widened to fp32 on the backend.
    if (wire == DType::BF16 || (collective_ && grads_on_host_))
      wire_ = Buffer(be, static_cast<std::size_t>(dp_ * piece_) * dtype_size(wire));
    if (wire == DType::BF16) widen_ = Buffer(be, static_cast<std::size_t>(piece_) * dtype_size(DType::F32));
  }
  opt_ = std::make_unique<Optimizer>(be, ps, begin_, end_, host_.get(), piece_);
  // Tensors replicated over tp have identical grads on every tp rank: count them once. The norm's
  // kernel takes int32 offsets: the shard is summed in parts of options.norm_part elements, each
  // tensor's range split at their borders and kept relative to its part (one part below 2^30).
  DIT_CHECK(options.norm_part >= 1 && options.norm_part <= 0x7fffffff, "ZeRO: norm parts of ", options.norm_part,
            " elements: expected 1 to 2^31 - 1");
  std::vector<std::int32_t> ranges;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const ParamSpec& s = ps.specs()[i];
    if (s.split == Split::Replicated && ctx.tp->rank() != 0) continue;
    const std::int64_t a = std::max(begin_, ps.offset(static_cast<int>(i))) - begin_;
    const std::int64_t b = std::min(end_, ps.offset(static_cast<int>(i)) + s.local(ps.tp()).numel()) - begin_;
    for (std::int64_t x = a; x < b;) {
      const std::int64_t part = x / options.norm_part, at = part * options.norm_part;
      const std::int64_t y = std::min(b, at + options.norm_part);
      if (norm_parts_.empty() || norm_parts_.back().begin != at)
        norm_parts_.push_back({at, std::min(shard, at + options.norm_part), static_cast<std::int64_t>(ranges.size() / 2), 0});
      ranges.push_back(static_cast<std::int32_t>(x - at));
      ranges.push_back(static_cast<std::int32_t>(y - at));
      ++norm_parts_.back().ranges;
      x = y;
    }
  }
  counted_ranges_ = static_cast<std::int64_t>(ranges.size() / 2);
  if (counted_ranges_ > 0) {
    Backend& gb = grads_backend();
    counted_ = Buffer(gb, ranges.size() * sizeof(std::int32_t));
    gb.copy(counted_.tensor({counted_ranges_, 2}, DType::I32),
            Tensor{ranges.data(), DType::I32, {counted_ranges_, 2}, Device::Host});
  }
  DIT_CHECK(options.level == 1 || !units_.empty(), "ZeRO-", options.level, ": the stage's units are needed");
  if (!units_.empty()) check_tiling(units_, ps.padded_numel());
  for (int u = 0; u < static_cast<int>(units_.size()); ++u) {
    const std::size_t bytes = static_cast<std::size_t>(units_[u].end - units_[u].begin) * 4;  // fp32 gradients
    Bucket* last = buckets_.empty() ? nullptr : &buckets_.back();
    if (last && static_cast<std::size_t>(last->range.end - last->range.begin) * 4 + bytes <= options.bucket_bytes) {
      last->end = u + 1;
      last->range.end = units_[u].end;
    } else {
      buckets_.push_back({u, u + 1, units_[u]});
    }
    bucket_of_.push_back(static_cast<int>(buckets_.size()) - 1);
  }
  fetching_.resize(buckets_.size());
  grads_held_.assign(units_.size(), 0);
  final_.assign(units_.size(), 0);
  if (sharded_values()) {
    values_ = UnitGather(be, ps.flat_values(), *ctx.dp, units_, options.overlap, kGatherTag);
  }
  if (sharded_grads()) {
    grads_ = PageHolds(be, ps.flat_grads());
    grads_.drop_unheld();
  }
}

std::size_t ZeroOptimizer::param_bytes() const {
  return sharded_values() ? values_.peak_bytes() : ps_->flat_values().bytes();
}

std::size_t ZeroOptimizer::grad_bytes() const {
  const std::size_t flat = sharded_grads() ? grads_bytes_.peak : ps_->flat_grads().bytes();
  return flat + (grads_on_host_ ? 0 : shard_grads_.bytes()) + sum_.bytes() + recv_.bytes() + wire_.bytes() +
         widen_.bytes();
}

Tensor ZeroOptimizer::staging(int slot, std::int64_t n) const {
  const DType wire = options_.reduce_dtype;
  return recv_.tensor({n}, wire, static_cast<std::size_t>(slot * piece_) * dtype_size(wire));
}

std::int64_t ZeroOptimizer::rounds(FlatRange r) const {
  const std::int64_t shard = end_ - begin_;
  std::int64_t longest = 0;
  for (std::int64_t o = r.begin / shard; o <= (r.end - 1) / shard; ++o)
    longest = std::max(longest, std::min(r.end, (o + 1) * shard) - std::max(r.begin, o * shard));
  return (longest + piece_ - 1) / piece_;
}

// Round k moves the k-th piece of every owner's part of r at once: each rank sends one piece to
// each other owner and receives the pieces of its own (an all-to-all when r spans every shard).
ZeroOptimizer::Round ZeroOptimizer::post_round(FlatRange r, std::int64_t k) {
  Comm& dp = *ctx_->dp;
  const std::int64_t shard = end_ - begin_;
  const Tensor flat = ps_->flat_grads();
  Round round;
  for (int o = static_cast<int>(r.begin / shard); o <= static_cast<int>((r.end - 1) / shard); ++o) {
    const std::int64_t x = std::max(r.begin, o * shard) + k * piece_;
    const std::int64_t n = std::min(piece_, std::min(r.end, (o + 1) * shard) - x);
    if (n <= 0) continue;
    if (o == rank_) {
      round.x = x, round.n = n;
      for (int q = 0; q < dp_; ++q)
        if (q != rank_) round.requests.push_back(dp.irecv(staging(q < rank_ ? q : q - 1, n), q, kReduceTag));
      continue;
    }
    Tensor out = flat.rows(x, n);
    if (options_.reduce_dtype == DType::BF16) {
      const Tensor w = wire_.tensor({n}, DType::BF16, static_cast<std::size_t>(o * piece_) * 2);
      be_->copy(w, out);
      out = w;
    }
    round.requests.push_back(dp.isend(out, o, kReduceTag));
  }
  return round;
}

void ZeroOptimizer::finish(Round& round) {
  for (Request& q : round.requests) ctx_->dp->wait(q);
  if (round.n > 0) sum_piece(round.x, round.n);
  round = Round{};
}

void ZeroOptimizer::reduce_now(FlatRange r) {
  for (std::int64_t k = 0, n = rounds(r); k < n; ++k) {
    Round round = post_round(r, k);
    finish(round);
  }
}

void ZeroOptimizer::reduce_bucket(int b) {
  finish_pending();
  const FlatRange r = buckets_[b].range;
  const std::int64_t n = rounds(r);
  for (std::int64_t k = 0; k + 1 < n; ++k) {
    Round round = post_round(r, k);
    finish(round);
  }
  pending_ = post_round(r, n - 1);
  pending_.bucket = b;
  if (!options_.overlap) finish_pending();
}

void ZeroOptimizer::finish_pending() {
  const int b = pending_.bucket;
  if (b < 0) return;
  finish(pending_);
  if (!sharded_grads()) return;
  // Zeros for the next step: the pages handed back read so; a page a neighbour still holds keeps
  // what is written here.
  const FlatRange r = buckets_[b].range;
  be_->fill(ps_->flat_grads().rows(r.begin, r.end - r.begin), 0.f);
  for (int u = buckets_[b].first; u < buckets_[b].end; ++u) {
    grads_.drop(units_[u]);
    grads_bytes_.sub(bytes_of(ps_->flat_grads(), units_[u]));
    grads_held_[u] = 0;
  }
}

void ZeroOptimizer::progress() {
  if (pending_.bucket >= 0) ctx_->dp->progress();  // (level 3's gathers progress themselves)
}

void ZeroOptimizer::sum_piece(std::int64_t x, std::int64_t n) {
  Backend& be = *be_;
  const Tensor shard = shard_grads_.tensor({end_ - begin_}, ParamSet::kGradDType).rows(x - begin_, n);
  // Offloaded, the shard is in host memory: the sum is made on the backend, then goes down.
  const Tensor out = grads_on_host_ ? sum_.tensor({n}, ParamSet::kGradDType) : shard;
  const Tensor own = ps_->flat_grads().rows(x, n);
  if (options_.reduce_dtype == DType::F32) {
    for (int q = 0; q < dp_; ++q) {
      const Tensor c = q == rank_ ? own : staging(q < rank_ ? q : q - 1, n);
      if (q == 0)
        be.copy(out, c);
      else
        be.axpy(1.f, c, out);
    }
  } else {
    // bf16 on the wire: every rank's piece, ours included, rounded to bf16 and widened into the fp32 sum.
    const Tensor own16 = wire_.tensor({n}, DType::BF16, static_cast<std::size_t>(rank_ * piece_) * 2);
    be.copy(own16, own);
    const Tensor wide = widen_.tensor({n}, DType::F32);
    for (int q = 0; q < dp_; ++q) {
      const Tensor c = q == rank_ ? own16 : staging(q < rank_ ? q : q - 1, n);
      if (q == 0) {
        be.copy(out, c);
      } else {
        be.copy(wide, c);
        be.axpy(1.f, wide, out);
      }
    }
  }
  if (grads_on_host_) be.copy(shard, out);
}

void ZeroOptimizer::enter(int unit, Pass pass, int next) {
  if (!sharded_values() && !fetching_.empty()) {  // levels 1, 2: last step's gather of its bucket
    std::vector<Request>& f = fetching_.at(bucket_of_.at(unit));
    for (Request& q : f) ctx_->dp->wait(q);
    f.clear();
  }
  if (sharded_values()) values_.enter(unit, pass, next);
  if (pass == Pass::Backward && sharded_grads() && !grads_held_.at(unit)) hold_grads(unit);
  progress();
}

void ZeroOptimizer::leave(int unit, Pass pass) {
  if (sharded_values()) values_.leave(unit, pass);
  progress();
}

void ZeroOptimizer::hold_grads(int unit) {
  grads_.hold(units_[unit]);
  grads_bytes_.add(bytes_of(ps_->flat_grads(), units_[unit]));
  grads_held_[unit] = 1;
}

void ZeroOptimizer::gradients_final(int unit) {
  if (!early_reduce() || final_.at(unit)) return;
  if (sharded_grads() && !grads_held_[unit]) hold_grads(unit);  // no backward touched it: its zeros are sent
  final_[unit] = 1;
  const Bucket& b = buckets_[bucket_of_[unit]];
  for (int u = b.first; u < b.end; ++u)
    if (!final_[u]) return;  // the bucket waits for the rest of its units
  reduce_bucket(bucket_of_[unit]);
}

void ZeroOptimizer::zero_grads() {
  if (!sharded_grads()) ps_->zero_grads();
}

void ZeroOptimizer::reduce_all() {
  if (early_reduce()) {
    for (std::size_t u = 0; u < units_.size(); ++u) gradients_final(static_cast<int>(u));  // any not yet reduced
    finish_pending();
    std::fill(final_.begin(), final_.end(), 0);
  } else if (collective_) {
    reduce_collective();
  } else if (dp_ > 1) {
    reduce_now({0, ps_->padded_numel()});
  }
  reduced_all_ = true;
}

void ZeroOptimizer::reduce_collective() {
  // The flat buffer holds the dp shards in rank order: what a reduce-scatter takes, at once into a
  // shard on the backend in fp32. Else (bf16 on the wire, or the shard in host memory) a piece of
  // each shard at a time, gathered into the wire buffer (dp pieces) and reduced into one piece (the
  // staging's first), which goes into the shard: widened to fp32 on the backend, then down.
  Comm& dp = *ctx_->dp;
  const std::int64_t shard = end_ - begin_;
  const DType wire_dtype = options_.reduce_dtype;
  const Tensor out = shard_grads_.tensor({shard}, ParamSet::kGradDType);
  if (wire_dtype == DType::F32 && !grads_on_host_) {
    dp.reduce_scatter_sum(ps_->flat_grads(), out);
    return;
  }
  for (std::int64_t x = 0; x < shard; x += piece_) {
    const std::int64_t n = std::min(piece_, shard - x);
    const Tensor wire = wire_.tensor({dp_ * n}, wire_dtype);
    for (int o = 0; o < dp_; ++o) be_->copy(wire.rows(o * n, n), ps_->flat_grads().rows(o * shard + x, n));
    Tensor mine = staging(0, n);
    dp.reduce_scatter_sum(wire, mine);
    if (wire_dtype != DType::F32 && grads_on_host_) {
      const Tensor wide = widen_.tensor({n}, DType::F32);
      be_->copy(wide, mine);
      mine = wide;
    }
    be_->copy(out.rows(x, n), mine);
  }
}

Tensor ZeroOptimizer::first_gradient() {
  if (!early_reduce()) return ps_->flat_grads().rows(0, 1);
  reduce_all();
  return shard_grads_.tensor({1}, ParamSet::kGradDType);
}

ZeroOptimizer::Result ZeroOptimizer::step(const AdamWConfig& cfg, double lr,
                                          std::int64_t step_number, double max_norm,
                                          double ema_decay, double loss_scale, NonFinite nonfinite) {
  Backend& be = *be_;
  settle();  // a unit no pass entered since the last step: its gather ends before the shard changes
  const std::int64_t n = end_ - begin_;
  Tensor grads = ps_->flat_grads().rows(begin_, n);
  if (!reduced_all_) reduce_all();
  reduced_all_ = false;
  if (dp_ > 1) grads = shard_grads_.tensor({n}, ParamSet::kGradDType);
  const double unscale = 1.0 / (static_cast<double>(dp_) * loss_scale);
  double sumsq = 0;
  const Tensor counted = counted_ranges_ > 0 ? counted_.tensor({counted_ranges_, 2}, DType::I32) : Tensor{};
  for (const NormPart& p : norm_parts_)
    sumsq += grads_backend().sum_squares_ranges(grads.rows(p.begin, p.end - p.begin), counted.rows(p.first, p.ranges));
  ctx_->world->all_reduce_sum(&sumsq, 1);
  Result r;
  r.grad_norm = std::sqrt(sumsq) * unscale;
  if (nonfinite == NonFinite::Discard || (nonfinite == NonFinite::Skip && !std::isfinite(r.grad_norm))) {
    r.applied = false;
    return r;
  }
  const double factor = clip_factor(r.grad_norm, max_norm);
  opt_->step(cfg, lr, step_number, grads, factor * unscale, ema_decay);
  if (gathers_behind_forward()) {
    for (std::size_t b = 0; b < buckets_.size(); ++b)
      fetching_[b] = post_range_gather(*ctx_->dp, ps_->flat_values(), buckets_[b].range, end_ - begin_, kGatherTag);
  } else if (dp_ > 1 && !sharded_values()) {
    ctx_->dp->all_gather(opt_->params(), ps_->flat_values());
  }
  return r;
}

void ZeroOptimizer::gather_values() {
  settle();
  if (dp_ > 1 && !sharded_values()) ctx_->dp->all_gather(opt_->params(), ps_->flat_values());
}

void ZeroOptimizer::settle() {
  if (sharded_values()) return;  // level 3's fetches belong to the passes that posted them
  for (std::vector<Request>& f : fetching_) {
    for (Request& q : f) ctx_->dp->wait(q);
    f.clear();
  }
}

ZeroOptimizer::~ZeroOptimizer() {
  // A step's gathers still in flight read and write buffers about to go. Unwinding from an error,
  // a peer may never send: the job is being taken down, so nothing is waited for.
  if (std::uncaught_exceptions() == 0) settle();
}

}  // namespace dit

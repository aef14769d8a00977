// Pipeline schedules as pure data: the ordered list of forward/backward actions one stage runs
// for m microbatches. An executor (pipeline.h) carries a list out; tests check the lists without
// any communication.
//
// 1F1B (PipeDream-flush, Megatron's default), on stage s of pp stages:
//   warmup   = min(pp - s - 1, m) forwards
//   steady   = m - warmup pairs: one forward, then one backward
//   cooldown = warmup backwards
// so at most pp - s microbatches are in flight on stage s. GPipe runs all m forwards, then all m
// backwards (m in flight).
//
// Interleaved 1F1B (Megatron's virtual stages): each rank holds v chunks of blocks; chunk c of rank
// s is model chunk c * pp + s, so a microbatch visits rank 0..pp-1 with chunk 0, wraps around to
// rank 0 with chunk 1, and so on. Each action names (chunk, microbatch). A rank runs its forwards in
// groups of pp microbatches, chunk by chunk, and its backwards in the same order with the chunks
// reversed; warmup = (pp - s - 1) * 2 + (v - 1) * pp forwards (Megatron's tables when pp divides
// m). Otherwise the m % pp leftover microbatches join the last group and its length replaces pp in
// the warmup, so any m runs. The bubble shrinks from (pp - 1) / (m + pp - 1) to
// (pp - 1) / (v m + pp - 1).
//
// Zero-bubble schedules (Qi et al., ICLR 2024) split each backward into B (BackwardInput: the
// gradient of the stage's input, which the previous stage waits for) and W (BackwardWeight: the
// weight gradients, which nobody waits for) and place the Ws in the bubbles. A microbatch's
// activations are held from its F until its W. Table of stage s of p, m microbatches:
//   ZB-H1: warm-up   p - s - 1 forwards (as 1F1B)
//          steady    F, B, and a W once more than s Ws are owed
//          cool-down B, and a W once more than s Ws are owed; then the s owed Ws
//   Stage s keeps s Ws back to fill its cool-down bubble: at T_F = T_B = T_W the idle time is
//   (p - 1) T_F per rank against 1F1B's 3 (p - 1) T_F, a bubble of (p - 1) / 3m of the work, with
//   1F1B's peak of p microbatches in flight.
//   ZB-V:  two chunks per rank laid out in a V: rank s holds model chunks s (chunk 0) and
//          2p - 1 - s (chunk 1), so a microbatch runs down the ranks on chunk 0 and back up on
//          chunk 1, and the first and last model chunks sit on rank 0.
//          warm-up   2 (p - s) - 1 forwards of chunk 0; s times F1, F0; p - s times F1, B1, W1
//          steady    F0, B0, W0, F1, B1, W1 until chunk 1's forwards are done
//          cool-down s times B0, B1; p - s times B0, W0; the owed W1s, then the owed W0s
//   (PyTorch's ScheduleZBVZeroBubble table; ops past m microbatches are dropped, so any m runs.)
//   At equal op times and m >= 2p no rank idles between its first and its last action.
#pragma once

#include <string>
#include <vector>
#include "core/named.h"

namespace dit {

// Backward: the whole backward (B and W fused); BackwardInput then BackwardWeight: its halves.
enum class Op : unsigned char { Forward, Backward, BackwardInput, BackwardWeight };

struct Action {
  Op op;
  int microbatch;
  int chunk = 0;  // which of this rank's model chunks (0 unless interleaved)
  bool operator==(const Action& o) const {
    return op == o.op && microbatch == o.microbatch && chunk == o.chunk;
  }
};

enum class ScheduleKind : unsigned char { OneFOneB, GPipe, ZbH1, ZbV };
inline constexpr Named<ScheduleKind> kScheduleNames[] = {
    {ScheduleKind::OneFOneB, "1f1b"}, {ScheduleKind::GPipe, "gpipe"}, {ScheduleKind::ZbH1, "zb-h1"},
    {ScheduleKind::ZbV, "zb-v"}};

ScheduleKind parse_schedule(const std::string& name);  // "1f1b" | "gpipe" | "zb-h1" | "zb-v"
std::string schedule_name(ScheduleKind k);
inline bool is_zero_bubble(ScheduleKind k) { return k == ScheduleKind::ZbH1 || k == ScheduleKind::ZbV; }

// How a rank's chunks map onto model chunks: Interleaved (chunk c of stage s is model chunk
// c * pp + s) or VShape (ZB-V: chunk 0 is model chunk s, chunk 1 is 2 pp - 1 - s).
enum class ChunkPlacement : unsigned char { Interleaved, VShape };
inline ChunkPlacement placement_of(ScheduleKind k) {
  return k == ScheduleKind::ZbV ? ChunkPlacement::VShape : ChunkPlacement::Interleaved;
}

std::vector<Action> make_1f1b(int pp, int stage, int microbatches);
std::vector<Action> make_gpipe(int pp, int stage, int microbatches);
std::vector<Action> make_zb_h1(int pp, int stage, int microbatches);
std::vector<Action> make_zb_v(int pp, int stage, int microbatches);  // two chunks, VShape
// Interleaved 1F1B with v chunks per rank (v = 1 is make_1f1b). Needs pp >= 2 when v > 1.
std::vector<Action> make_interleaved(int pp, int stage, int microbatches, int v);
// The pipeline schedule of `kind` for one stage, with v virtual stages per rank: v > 1 under 1F1B
// (it is then interleaved) and ZB-V (v = 2). (The diffusion's noise schedule is
// diffusion::make_schedule.)
std::vector<Action> make_pipeline_schedule(ScheduleKind kind, int pp, int stage, int microbatches, int v = 1);
// (chunk, microbatch) pairs of one step are told apart by MPI tags; this many fit the tag space any
// MPI grants.
inline constexpr int kMaxMicrobatches = 15999;
// Throws one line when (kind, pp, m, v) has no schedule: virtual stages other than 1F1B's and
// ZB-V's, ZB-V with v != 2, zero-bubble at pp 1, more (chunk, microbatch) pairs than kMaxMicrobatches. An
// invariant: the run configuration's check (io/config_validate.cpp, TrainSetup::make) names the keys.
void check_virtual_stages(ScheduleKind kind, int pp, int microbatches, int v);
// ZB-V's even split: throws unless `blocks` splits into 2 pp equal chunks.
void check_v_split(int pp, int blocks);
// The model chunk (0 .. pp * v - 1, in model order) that chunk c of stage s holds.
inline int model_chunk(int pp, int stage, int chunk, ChunkPlacement pl = ChunkPlacement::Interleaved) {
  if (pl == ChunkPlacement::VShape) return chunk == 0 ? stage : 2 * pp - 1 - stage;
  return chunk * pp + stage;
}
// Which (stage, chunk) holds model chunk k.
struct ChunkAt {
  int stage = 0, chunk = 0;
};
inline ChunkAt chunk_at(int pp, int k, ChunkPlacement pl = ChunkPlacement::Interleaved) {
  if (pl == ChunkPlacement::VShape) return k < pp ? ChunkAt{k, 0} : ChunkAt{2 * pp - 1 - k, 1};
  return {k % pp, k / pp};
}
// The stage holding the last model chunk (the model output, the loss): pp - 1, or 0 in a V.
inline int output_stage(int pp, int v, ChunkPlacement pl) { return chunk_at(pp, pp * v - 1, pl).stage; }

// Forward passes only (sampling, evaluation); with v chunks per rank, in the interleaved order.
std::vector<Action> make_forward_only(int microbatches, int pp = 1, int v = 1);

// Largest number of microbatches whose forward ran and whose backward (its W, when split) did not.
int max_in_flight(const std::vector<Action>& actions);

// The idle fraction of an ideal pipeline with equal stage times: (pp - 1) / (v m + pp - 1)
// (v = 1: plain 1F1B or GPipe).
double theoretical_bubble(int pp, int microbatches, int v = 1);
// The same for any schedule at T_F = T_B = T_W (a fused backward 2 T_F): 1F1B, GPipe and
// interleaved as above; ZB-H1 (pp - 1) / (3m + pp - 1) (idle (pp - 1) / 3m of the work, m >= pp);
// ZB-V (pp - 1) / (6m + pp - 1) in chunk times (m >= 2 pp: only the fill of the first forward).
double theoretical_bubble(ScheduleKind kind, int pp, int microbatches, int v);

}  // namespace dit

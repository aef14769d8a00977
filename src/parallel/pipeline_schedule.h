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
#pragma once

#include <string>
#include <vector>
#include "core/named.h"

namespace dit {

enum class Op : unsigned char { Forward, Backward };

struct Action {
  Op op;
  int microbatch;
  int chunk = 0;  // which of this rank's model chunks (0 unless interleaved)
  bool operator==(const Action& o) const {
    return op == o.op && microbatch == o.microbatch && chunk == o.chunk;
  }
};

enum class ScheduleKind : unsigned char { OneFOneB, GPipe };
inline constexpr Named<ScheduleKind> kScheduleNames[] = {{ScheduleKind::OneFOneB, "1f1b"}, {ScheduleKind::GPipe, "gpipe"}};

ScheduleKind parse_schedule(const std::string& name);  // "1f1b" | "gpipe"
std::string schedule_name(ScheduleKind k);

std::vector<Action> make_1f1b(int pp, int stage, int microbatches);
std::vector<Action> make_gpipe(int pp, int stage, int microbatches);
// Interleaved 1F1B with v chunks per rank (v = 1 is make_1f1b). Needs pp >= 2 when v > 1.
std::vector<Action> make_interleaved(int pp, int stage, int microbatches, int v);
// kind with v virtual stages per rank: v > 1 only under 1F1B (it is then interleaved).
std::vector<Action> make_schedule(ScheduleKind kind, int pp, int stage, int microbatches, int v = 1);
// Throws one line naming parallel.virtual_stages when (kind, pp, m, v) has no schedule.
void check_virtual_stages(ScheduleKind kind, int pp, int microbatches, int v);
// The model chunk (0 .. pp * v - 1, in model order) that chunk c of stage s holds.
inline int model_chunk(int pp, int stage, int chunk) { return chunk * pp + stage; }
// Forward passes only (sampling, evaluation); with v chunks per rank, in the interleaved order.
std::vector<Action> make_forward_only(int microbatches, int pp = 1, int v = 1);

// Largest number of microbatches whose forward ran and backward did not, over the list.
int max_in_flight(const std::vector<Action>& actions);

// The idle fraction of an ideal pipeline with equal stage times: (pp - 1) / (v m + pp - 1)
// (v = 1: plain 1F1B or GPipe).
double theoretical_bubble(int pp, int microbatches, int v = 1);

}  // namespace dit

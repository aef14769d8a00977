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
#pragma once

#include <string>
#include <vector>

namespace dit {

enum class Op : unsigned char { Forward, Backward };

struct Action {
  Op op;
  int microbatch;
  bool operator==(const Action& o) const { return op == o.op && microbatch == o.microbatch; }
};

enum class ScheduleKind : unsigned char { OneFOneB, GPipe };

ScheduleKind parse_schedule(const std::string& name);  // "1f1b" | "gpipe"
std::string schedule_name(ScheduleKind k);

std::vector<Action> make_1f1b(int pp, int stage, int microbatches);
std::vector<Action> make_gpipe(int pp, int stage, int microbatches);
std::vector<Action> make_schedule(ScheduleKind kind, int pp, int stage, int microbatches);
// Forward passes only (sampling, evaluation).
std::vector<Action> make_forward_only(int microbatches);

// Largest number of microbatches whose forward ran and backward did not, over the list.
int max_in_flight(const std::vector<Action>& actions);

// The idle fraction of an ideal pipeline with equal stage times: (pp - 1) / (m + pp - 1).
double theoretical_bubble(int pp, int microbatches);

}  // namespace dit

// Event-by-event simulation of pipeline schedule tables: every rank runs its own list in order,
// and an action starts when its rank is free and its input has arrived (the producing action on
// the neighbouring rank finished, plus the link time). Used by the schedule tests (no deadlock,
// bubble) and by the performance model (dit_mp plan --predict), so both read the real tables.
#pragma once

#include <functional>
#include <vector>

#include "parallel/pipeline_schedule.h"

namespace dit {

struct PipelineSim {
  bool completed = false;      // false: some rank waits forever (the lists deadlock)
  double makespan = 0;         // time until the last action on any rank ends
  std::vector<double> busy;    // per rank: time spent in actions
  std::vector<double> finish;  // per rank: when its last action ended
  std::vector<double> start;   // per rank: when its first action began
  // Idle share of the slowest rank's time up to the makespan: 1 - busy / makespan, averaged
  // over ranks (the pipeline bubble).
  double bubble() const;
  // Per rank: idle time between its first action's start and its last action's end (the
  // steady-state bubble, without the fill before the first action and the drain after the last).
  double gap(int rank) const { return finish[rank] - start[rank] - busy[rank]; }
};

// Producer of an action's input on pp stages with v chunks each, as (rank, action), or rank -1
// when the input is local (the first model chunk's forward; the last chunk's backward, which
// needs only its own forward; a weight backward, which needs only its own input backward). A
// backward's input is the next model chunk's backward of the same op (fused or B).
struct Producer {
  int rank = -1;
  Action action{Op::Forward, 0, 0};
};
Producer producer_of(const Action& a, int stage, int pp, int v,
                     ChunkPlacement placement = ChunkPlacement::Interleaved);

// lists[s]: the actions of stage s. cost(s, a): seconds of action a on stage s. link(s, a):
// seconds for the message that action a on stage s sends to feed its consumer (0 if none).
PipelineSim simulate_pipeline(const std::vector<std::vector<Action>>& lists, int v,
                              const std::function<double(int, const Action&)>& cost,
                              const std::function<double(int, const Action&)>& link,
                              ChunkPlacement placement = ChunkPlacement::Interleaved);

}  // namespace dit

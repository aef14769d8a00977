// Event-by-event pipeline simulation (see schedule_sim.h).
#include "parallel/schedule_sim.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "core/error.h"

namespace dit {

double PipelineSim::bubble() const {
  if (busy.empty() || makespan <= 0) return 0;
  double idle = 0;
  for (double b : busy) idle += 1 - b / makespan;
  return idle / static_cast<double>(busy.size());
}

Producer producer_of(const Action& a, int stage, int pp, int v, ChunkPlacement placement) {
  const int k = model_chunk(pp, stage, a.chunk, placement);  // virtual stage
  Producer p;
  if (a.op == Op::BackwardWeight) return p;
  const bool fwd = a.op == Op::Forward;
  if (fwd ? k == 0 : k == pp * v - 1) return p;
  const ChunkAt at = chunk_at(pp, fwd ? k - 1 : k + 1, placement);
  p.rank = at.stage;
  p.action = {a.op, a.microbatch, at.chunk};
  return p;
}

PipelineSim simulate_pipeline(const std::vector<std::vector<Action>>& lists, int v,
                              const std::function<double(int, const Action&)>& cost,
                              const std::function<double(int, const Action&)>& link,
                              ChunkPlacement placement) {
  const int pp = static_cast<int>(lists.size());
  using Key = std::tuple<int, int, int, int>;  // rank, op, chunk, microbatch
  auto key = [](int r, const Action& a) { return Key{r, static_cast<int>(a.op), a.chunk, a.microbatch}; };
  std::map<Key, double> arrive;  // when an action's output reaches its consumer
  PipelineSim sim;
  sim.busy.assign(pp, 0);
  sim.finish.assign(pp, 0);
  sim.start.assign(pp, -1);
  std::vector<std::size_t> pos(pp, 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < pp; ++r)
      for (; pos[r] < lists[r].size(); ++pos[r], moved = true) {
        const Action& a = lists[r][pos[r]];
        const Producer p = producer_of(a, r, pp, v, placement);
        double ready = sim.finish[r];
        if (p.rank >= 0) {
          auto it = arrive.find(key(p.rank, p.action));
          if (it == arrive.end()) break;  // its input has not been produced yet
          ready = std::max(ready, it->second);
        }
        if (sim.start[r] < 0) sim.start[r] = ready;
        const double c = cost(r, a);
        sim.finish[r] = ready + c;
        sim.busy[r] += c;
        arrive[key(r, a)] = sim.finish[r] + link(r, a);
      }
  }
  for (double& s : sim.start) s = std::max(s, 0.0);
  sim.completed = true;
  for (int r = 0; r < pp; ++r) sim.completed &= pos[r] == lists[r].size();
  sim.makespan = *std::max_element(sim.finish.begin(), sim.finish.end());
  return sim;
}

}  // namespace dit

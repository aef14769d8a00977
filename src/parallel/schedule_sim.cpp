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

Producer producer_of(const Action& a, int stage, int pp, int v) {
  const int k = a.chunk * pp + stage;  // virtual stage
  Producer p;
  if (a.op == Op::Forward) {
    if (k == 0) return p;
    p.rank = (k - 1) % pp;
    p.action = {Op::Forward, a.microbatch, (k - 1) / pp};
  } else {
    if (k == pp * v - 1) return p;
    p.rank = (k + 1) % pp;
    p.action = {Op::Backward, a.microbatch, (k + 1) / pp};
  }
  return p;
}

PipelineSim simulate_pipeline(const std::vector<std::vector<Action>>& lists, int v,
                              const std::function<double(int, const Action&)>& cost,
                              const std::function<double(int, const Action&)>& link) {
  const int pp = static_cast<int>(lists.size());
  using Key = std::tuple<int, int, int, int>;  // rank, op, chunk, microbatch
  auto key = [](int r, const Action& a) { return Key{r, static_cast<int>(a.op), a.chunk, a.microbatch}; };
  std::map<Key, double> arrive;  // when an action's output reaches its consumer
  PipelineSim sim;
  sim.busy.assign(pp, 0);
  sim.finish.assign(pp, 0);
  std::vector<std::size_t> pos(pp, 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < pp; ++r)
      for (; pos[r] < lists[r].size(); ++pos[r], moved = true) {
        const Action& a = lists[r][pos[r]];
        const Producer p = producer_of(a, r, pp, v);
        double ready = sim.finish[r];
        if (p.rank >= 0) {
          auto it = arrive.find(key(p.rank, p.action));
          if (it == arrive.end()) break;  // its input has not been produced yet
          ready = std::max(ready, it->second);
        }
        const double c = cost(r, a);
        sim.finish[r] = ready + c;
        sim.busy[r] += c;
        arrive[key(r, a)] = sim.finish[r] + link(r, a);
      }
  }
  sim.completed = true;
  for (int r = 0; r < pp; ++r) sim.completed &= pos[r] == lists[r].size();
  sim.makespan = *std::max_element(sim.finish.begin(), sim.finish.end());
  return sim;
}

}  // namespace dit

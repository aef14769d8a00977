// Gathering and printing the rank map (see rank_map.h).
#include "run/rank_map.h"

#include <sched.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "core/error.h"
#include "backend/gpu_versions.h"

namespace dit {

namespace {

constexpr int kHost = 64, kWhere = 64;  // fixed-size fields of the gather

// "0-3,8" from the affinity mask.
std::string cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return "?";
  std::string s;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    int e = c;
    while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, &set)) ++e;
    if (!s.empty()) s += ',';
    s += std::to_string(c);
    if (e > c) s += '-' + std::to_string(e);
    c = e;
  }
  return s;
}

}  // namespace

std::string format_rank_map(const Layout& layout, const std::vector<RankPlace>& places, bool gpus) {
  std::string out = "rank map (" + layout.str() + "; tp ranks are consecutive, keep each tp group on one node):\n";
  std::map<int, std::set<std::string>> tp_hosts;  // tp group (dp + dp_size * pp) -> hosts
  std::map<std::string, int> per_where;           // "host|where" -> ranks on it
  for (int r = 0; r < static_cast<int>(places.size()); ++r) {
    const RankPlace& p = places[static_cast<std::size_t>(r)];
    const GridCoord g = grid_coord(layout, r);
    char line[256];
    std::snprintf(line, sizeof line, "  rank %3d  node %-20s %-16s tp %d pp %d dp %d\n", r, p.host.c_str(),
                  p.where.c_str(), g.tp, g.pp, g.dp);
    out += line;
    tp_hosts[g.dp + layout.dp * g.pp].insert(p.host);
    ++per_where[p.host + "|" + p.where];
  }
  for (const auto& [group, hosts] : tp_hosts)
    if (hosts.size() > 1) {
      std::string names;
      for (const auto& h : hosts) {
        if (!names.empty()) names += ", ";
        names += h;
      }
      out += "  warning: tp group " + std::to_string(group) + " spans nodes " + names +
             ": its all-reduces cross the network; give each node a multiple of tp = " +
             std::to_string(layout.tp) + " consecutive ranks\n";
    }
  if (gpus)
    for (const auto& [key, count] : per_where)
      if (count > 1)
        out += "  note: " + std::to_string(count) + " ranks share " + key.substr(key.find('|') + 1) + " on node " +
               key.substr(0, key.find('|')) + "\n";
  return out;
}

std::string rank_map(const ParallelContext& ctx, const std::string& device) {
  const int n = ctx.layout.world();
  char mine[kHost + kWhere] = {};
  gethostname(mine, kHost - 1);
  const std::string where = device.empty() ? "cores " + cores() : device;
  std::strncpy(mine + kHost, where.c_str(), kWhere - 1);
  std::vector<char> all(static_cast<std::size_t>(n) * sizeof mine);
  // The records travel as int32 words (sizeof mine is a multiple of 4) through the world Comm.
  constexpr std::int64_t kWords = sizeof mine / sizeof(std::int32_t);
  static_assert(sizeof mine % sizeof(std::int32_t) == 0);
  ctx.world->all_gather(Tensor{mine, DType::I32, {kWords}, Device::Host},
                        Tensor{all.data(), DType::I32, {n * kWords}, Device::Host});
  if (ctx.world_rank != 0) return "";
  std::vector<RankPlace> places;
  for (int r = 0; r < n; ++r) {
    const char* rec = all.data() + static_cast<std::size_t>(r) * sizeof mine;
    places.push_back({std::string(rec), std::string(rec + kHost)});
  }
  std::string map = format_rank_map(ctx.layout, places, !device.empty());
  if (device.empty()) return map;
  // The GPU libraries as this rank loaded them (a GPU host brings its own), and any that is older
  // than the build needs.
  const std::vector<LibraryVersion> libs = gpu_library_versions();
  map += "GPU libraries (rank 0): " + describe_gpu_versions(libs) + "\n";
  for (const std::string& problem : gpu_version_problems(libs)) map += "warning: " + problem + "\n";
  return map;
}

}  // namespace dit

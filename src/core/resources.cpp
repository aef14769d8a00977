// Formatting and memory readings (see resources.h).
#include "core/resources.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace dit {

std::string format_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char s[32];
  std::snprintf(s, sizeof s, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return s;
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const long t = std::lround(s);
  char b[32];
  if (t >= 3600) std::snprintf(b, sizeof b, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else if (t >= 60) std::snprintf(b, sizeof b, "%ldm%02lds", t / 60, t % 60);
  else std::snprintf(b, sizeof b, "%lds", t);
  return b;
}

namespace {
// A /proc/self/status field ("VmHWM", "RssAnon") in bytes; 0 when absent.
std::uint64_t status_bytes(const std::string& key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key + ":", 0) == 0) {
      std::istringstream is(line.substr(key.size() + 1));
      std::uint64_t kb = 0;
      is >> kb;
      return kb * 1024;
    }
  return 0;
}
}  // namespace

std::uint64_t peak_rss_bytes() { return status_bytes("VmHWM"); }
std::uint64_t rss_bytes() { return status_bytes("RssAnon") + status_bytes("RssShmem"); }

bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";  // resets VmHWM to the resident memory now (Linux 4.0 and later)
  return static_cast<bool>(f.flush());
}

double machine_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? double(pages) * double(page) : 0.0;
}

namespace {

// The first number of a file (cgroup files hold one; "max" reads as 0: no limit).
double read_number(const char* path) {
  std::ifstream f(path);
  double v = 0;
  return f >> v ? v : 0.0;
}

// A /proc/meminfo field in bytes; 0 when absent.
double meminfo_bytes(const std::string& key) {
  std::ifstream f("/proc/meminfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind(key + ":", 0) == 0) {
      std::istringstream is(line.substr(key.size() + 1));
      double kb = 0;
      is >> kb;
      return kb * 1024;
    }
  return 0;
}

// A cgroup's memory.stat field ("inactive_file"); 0 when absent.
double stat_field(const std::string& stat_file, const std::string& key) {
  std::ifstream f(stat_file);
  std::string name;
  double v = 0;
  while (f >> name >> v)
    if (name == key) return v;
  return 0;
}

// The memory cgroups this process is in, its own first and then each one above it: pairs of
// (limit file, usage file). /proc/self/cgroup gives the path ("0::/a/b" on cgroup v2, "N:memory:/a/b"
// on v1), which a job scheduler (SLURM's --mem) or a container sets; in a container with its own
// cgroup namespace the path is "/", the mount's root.
std::vector<std::pair<std::string, std::string>> memory_cgroups() {
  std::vector<std::pair<std::string, std::string>> out;
  std::ifstream f("/proc/self/cgroup");
  for (std::string line; std::getline(f, line);) {
    const auto a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",";
    std::string path = line.substr(b + 1);
    const bool v2 = controllers == ",,", v1 = controllers.find(",memory,") != std::string::npos;
    if (!v2 && !v1) continue;
    const std::string root = v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory";
    for (;;) {
      const std::string dir = root + (path == "/" ? "" : path);
      out.emplace_back(dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes"),
                       dir + (v2 ? "/memory.current" : "/memory.usage_in_bytes"));
      if (path.empty() || path == "/") break;
      const auto up = path.rfind('/');
      path = up == 0 || up == std::string::npos ? "/" : path.substr(0, up);
    }
  }
  return out;
}

}  // namespace

HostMemory host_memory() {
  HostMemory m;
  m.source = "machine";
  m.limit = meminfo_bytes("MemTotal");
  m.free = meminfo_bytes("MemAvailable");
  if (m.limit <= 0) m.limit = machine_memory_bytes();
  // The tightest cgroup limit below the machine's, from this process's own cgroup up.
  for (const auto& [limit_file, usage_file] : memory_cgroups()) {
    const double limit = read_number(limit_file.c_str());
    if (limit <= 0 || (m.limit > 0 && limit >= m.limit)) continue;  // no limit, or none below the tightest yet
    m.limit = limit;
    // Its inactive file cache (v1 counts its subtree as total_inactive_file) is reclaimable: free.
    const std::string stat = usage_file.substr(0, usage_file.rfind('/')) + "/memory.stat";
    const bool v1 = usage_file.find("usage_in_bytes") != std::string::npos;
    const double cache = stat_field(stat, v1 ? "total_inactive_file" : "inactive_file");
    const double used = read_number(usage_file.c_str()) - cache;
    m.free = std::min(m.free > 0 ? m.free : limit, std::max(0.0, limit - std::max(0.0, used)));
    m.source = "cgroup";
  }
  return m;
}

HostBudget host_budget(int ranks_here) {
  const HostMemory h = host_memory();
  const int ranks = std::max(ranks_here, 1);
  const double limit = h.limit > 0 ? h.limit : machine_memory_bytes(), held = double(rss_bytes());
  HostBudget b;
  b.bytes = std::max(0.0, limit / ranks - held);
  b.where = format_bytes(b.bytes) + " of " +
            (std::string(h.source) == "cgroup" ? "this memory cgroup's " : "this machine's ") + format_bytes(limit) +
            " (a share of " + std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks") + " less the " +
            format_bytes(held) + " this process holds)";
  return b;
}

}  // namespace dit

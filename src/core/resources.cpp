// Formatting and memory readings (see resources.h).
#include "core/resources.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

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

std::uint64_t peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) {
      std::istringstream is(line.substr(6));
      std::uint64_t kb = 0;
      is >> kb;
      return kb * 1024;
    }
  return 0;
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

}  // namespace

HostMemory host_memory() {
  HostMemory m;
  m.source = "machine";
  m.limit = meminfo_bytes("MemTotal");
  m.free = meminfo_bytes("MemAvailable");
  if (m.limit <= 0) m.limit = machine_memory_bytes();
  const struct {
    const char *limit, *usage;
  } cgroups[] = {{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
                 {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"}};
  for (const auto& c : cgroups) {
    const double limit = read_number(c.limit);
    if (limit <= 0 || (m.limit > 0 && limit >= m.limit)) continue;  // no limit, or none below the machine's
    m.limit = limit;
    m.free = std::min(m.free > 0 ? m.free : limit, std::max(0.0, limit - read_number(c.usage)));
    m.source = "cgroup";
    break;
  }
  return m;
}

}  // namespace dit

// Finding and running tools/plot_run.py (see plots.h).
#include "run/plots.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "core/resources.h"

namespace dit {

namespace fs = std::filesystem;

namespace {

// What tools/plot_run.py holds at its peak: 76 MiB measured (python3 3.11, matplotlib 3.6, a
// run of 30 steps), with room for a longer metrics.jsonl.
constexpr double kPlotBytes = 128.0 * (1 << 20);

// The script beside the build (build*/bin/dit_mp -> tools/plot_run.py of the source tree).
std::string plot_script() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  for (const fs::path& p : {exe.parent_path() / "../../tools/plot_run.py", exe.parent_path() / "../tools/plot_run.py"})
    if (fs::is_regular_file(p, ec)) return fs::weakly_canonical(p, ec).string();
  return "";
}

std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

std::string write_run_plots(const std::string& run_dir) {
  const char* off = std::getenv("DIT_PLOTS");
  if (off && std::string(off) == "0") return "";
  const std::string script = plot_script();
  if (script.empty()) return "plots: tools/plot_run.py not found beside this build; run it on " + run_dir;
  // The plotting process is memory too, in this job's cgroup: where it would not fit what the run
  // leaves, the plots are skipped with a line rather than the OOM killer ending the finished run.
  const HostMemory host = host_memory();
  if (host.free > 0 && host.free < kPlotBytes) {
    const std::string of = std::string(host.source) == "cgroup" ? "this memory cgroup's " : "this machine's ";
    return "plots: skipped: tools/plot_run.py (python3 and matplotlib) takes about " + format_bytes(kPlotBytes) +
           ", and " + format_bytes(host.free) + " of " + of + format_bytes(host.limit) + " is free; run python3 " +
           script + " " + run_dir + " where memory allows";
  }
  const std::string log = (fs::path(run_dir) / "plots.log").string();
  // The first python3 on PATH may lack matplotlib (e.g. a virtual environment): Debian's is next.
  for (const char* py : {"python3", "/usr/bin/python3"}) {
    const std::string cmd = std::string(py) + " " + quoted(script) + " " + quoted(run_dir) + " > " + quoted(log) + " 2>&1";
    const int rc = std::system(cmd.c_str());
    if (rc == -1 || !WIFEXITED(rc)) break;
    if (WEXITSTATUS(rc) == 0) return "plots: " + run_dir + "/loss.png, " + run_dir + "/throughput.png";
    if (WEXITSTATUS(rc) != 3 && WEXITSTATUS(rc) != 127) return "plots failed: see " + log;
  }
  return "plots: no python3 with matplotlib (apt-get install python3-matplotlib); skipped";
}

}  // namespace dit

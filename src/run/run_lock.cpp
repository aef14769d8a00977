// Taking, recognising stale, and releasing the run-folder lock (see run_lock.h).
#include "run/run_lock.h"

#include "io/file_safety.h"

#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"
#include "io/file_roles.h"

namespace dit {

namespace fs = std::filesystem;

namespace {

using Fields = std::map<std::string, std::string>;

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

std::string host_name() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

// Field `n` of /proc/<pid>/stat ("" when unreadable): 3 is the state (Z: a zombie, dead but not
// reaped, e.g. under a container's init), 22 when the process started (clock ticks since boot),
// which with the pid identifies a process even after the pid is reused.
std::string stat_field(long pid, int n) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return "";
  const auto paren = stat.rfind(')');  // the command name may contain spaces
  if (paren == std::string::npos) return "";
  std::istringstream rest(stat.substr(paren + 2));
  std::string f;
  for (int i = 3; i <= n && rest >> f; ++i) {
  }
  return f;
}
std::string start_ticks(long pid) { return stat_field(pid, 22); }

std::string describe_self() {
  const long pid = static_cast<long>(getpid());
  std::ostringstream os;
  os << "host=" << host_name() << "\npid=" << pid << "\nstart_ticks=" << start_ticks(pid)
     << "\njob_id=" << env_or("SLURM_JOB_ID", "") << "\nrestart_count=" << env_or("SLURM_RESTART_COUNT", "0")
     << "\nstarted=" << static_cast<long long>(std::time(nullptr)) << "\n";
  return os.str();
}

Fields parse(const std::string& text) {
  Fields f;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) f[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return f;
}

std::string read_all(const fs::path& p) { return read_regular(p.string(), "the lock file"); }

// Whether `f` names a holder as describe_self() writes one: a host, a numeric pid, a start time.
bool lock_lines(const Fields& f) {
  const auto number = [&](const char* k) {
    const auto it = f.find(k);
    return it != f.end() && !it->second.empty() && it->second.find_first_not_of("0123456789") == std::string::npos;
  };
  const auto host = f.find("host");
  return host != f.end() && !host->second.empty() && number("pid") && number("started");
}

// The first bytes of a file that is not a lock, printable ("" for none).
std::string shown_head(const std::string& text) {
  std::string s;
  for (std::size_t i = 0; i < text.size() && s.size() < 40; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '"') {
      s += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      s += hex;
    }
  }
  return "\"" + s + (text.size() > 40 ? "...\"" : "\"");
}

// A lock file dit_mp did not write (or one damaged): refused, never judged stale nor removed.
[[noreturn]] void foreign_lock(const std::string& run_dir, const fs::path& lock, const std::string& text,
                               const LockedPath& what) {
  DIT_FAIL(what.thing, " ", run_dir, ": its lock file ", lock.string(), " is not dit_mp's lock (",
           text.empty() ? std::string("it is empty") : "it holds " + shown_head(text),
           ", not the host=, pid= and started= lines a lock holds): if no ", what.holder,
           " uses it, delete it, or choose another ", what.setting);
}

std::string holder(const Fields& f) {
  std::string s = "host " + f.at("host") + ", pid " + f.at("pid");
  if (!f.at("job_id").empty()) s += ", SLURM job " + f.at("job_id");
  const std::time_t t = static_cast<std::time_t>(std::atoll(f.at("started").c_str()));
  char when[64];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&t));
  return s + ", since " + when;
}

// Why the holder is known to be gone ("" when it may be alive).
std::string stale_reason(const Fields& f) {
  const std::string job = env_or("SLURM_JOB_ID", "");
  if (!job.empty() && f.at("job_id") == job &&
      std::atoll(f.at("restart_count").c_str()) < std::atoll(env_or("SLURM_RESTART_COUNT", "0").c_str()))
    return "an earlier run of this SLURM job (requeued since)";
  if (f.at("host") != host_name()) return "";
  const long pid = std::atol(f.at("pid").c_str());
  if (pid <= 0) return "no valid pid";
  if ((kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) || stat_field(pid, 3) == "Z")
    return "process " + f.at("pid") + " no longer runs";
  if (!f.at("start_ticks").empty() && start_ticks(pid) != f.at("start_ticks"))
    return "process " + f.at("pid") + " no longer runs (the pid was reused)";
  return "";
}

}  // namespace

std::string run_lock_path(const std::string& run_dir) {
  // The folder's real path: a run that names it through a symlink, or by another relative path,
  // takes the same lock (the file-role table's "beside:.lock", io/file_roles.h).
  return beside_path(run_dir, ".lock");
}

RunLock RunLock::acquire(const std::string& run_dir, std::string* note, const LockedPath& what) {
  const fs::path lock = run_lock_path(run_dir);
  if (lock.has_parent_path()) fs::create_directories(lock.parent_path());
  // Write the whole description under a private name, then link it to the lock name: link fails
  // if the lock exists, so exactly one of two racing runs gets it.
  const fs::path mine = lock.string() + ".tmp-" + host_name() + "-" + std::to_string(getpid());
  {
    errno = 0;
    std::ofstream out(mine, std::ios::trunc);
    out << describe_self();
    out.flush();
    const int err = errno;
    DIT_CHECK(out.good(), what.setting, what.setting[0] == '-' ? " " : " = ", run_dir, ": cannot write its lock file ",
              lock.string(), " beside it: ", err ? describe_errno(err) : std::string("the folder is not writable"));
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (link(mine.c_str(), lock.c_str()) == 0) {
      fs::remove(mine);
      return RunLock(lock.string());
    }
    const int err = errno;
    if (err != EEXIST) {
      fs::remove(mine);
      DIT_FAIL("cannot take the ", what.holder, " lock ", lock.string(), ": ", std::strerror(err));
    }
    const std::string text = read_all(lock);
    Fields f = parse(text);
    std::error_code gone;
    if (text.empty() && !fs::exists(lock, gone)) continue;  // released meanwhile: try again
    if (!lock_lines(f)) {
      fs::remove(mine);
      foreign_lock(run_dir, lock, text, what);
    }
    for (const char* k : {"host", "pid", "start_ticks", "job_id", "restart_count", "started"}) f.emplace(k, "");
    const std::string why = stale_reason(f);
    if (why.empty() || attempt > 0) {
      fs::remove(mine);
      DIT_FAIL(what.thing, " ", run_dir, " is in use by another ", what.holder, " (", holder(f), "; lock ",
               lock.string(), "): wait for it to end or choose another ", what.setting, "; if that ", what.holder,
               " is gone, delete the lock file");
    }
    // Remove the stale lock only if it is still the one judged stale (another run may have
    // replaced it meanwhile): move it aside, compare, and put it back if it changed.
    const fs::path aside = lock.string() + ".stale-" + std::to_string(getpid());
    if (std::rename(lock.c_str(), aside.c_str()) == 0) {
      if (read_all(aside) != text) {
        if (link(aside.c_str(), lock.c_str()) != 0) { /* a third run holds it now; the retry says so */ }
      }
      fs::remove(aside);
    }
    if (note)
      *note = std::string("removed the stale ") + what.holder + " lock " + lock.string() + " of " + holder(f) + ": " +
              why;
  }
  fs::remove(mine);
  DIT_FAIL("cannot take the ", what.holder, " lock ", lock.string());
}

RunLock& RunLock::operator=(RunLock&& o) noexcept {
  if (this != &o) {
    this->~RunLock();
    path_ = std::move(o.path_);
    o.path_.clear();
  }
  return *this;
}

RunLock::~RunLock() {
  if (path_.empty()) return;
  std::error_code ec;
  fs::remove(path_, ec);
}

}  // namespace dit

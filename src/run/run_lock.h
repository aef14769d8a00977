// The run-folder lock: while a run uses a run folder, `<run dir>.lock` beside it names the holder
// (host, pid, SLURM job id and restart count, start time). It is taken atomically (link(2) of a
// complete file, so no reader ever sees half a lock, also on NFS), before the folder is created,
// overwritten or resumed, so two runs never mix one folder. A lock whose holder is gone is stale:
// a dead pid on this host, or an earlier incarnation of this same SLURM job (requeued); it is
// removed with a note. Any other holder refuses the run with one line naming it.
#pragma once

#include <string>

namespace dit {

// What a lock guards, in its messages: the thing, the kind of job that holds it, and the setting a
// user changes to choose another.
struct LockedPath {
  const char* thing = "run folder";
  const char* holder = "run";
  const char* setting = "run.dir";
};

class RunLock {
 public:
  // Takes the lock of `run_dir` or throws naming the holder. `note` receives a line when a stale
  // lock was removed (empty otherwise). The same lock guards any output a job writes for a while
  // (a dataset being prepared), named by `what`.
  static RunLock acquire(const std::string& run_dir, std::string* note = nullptr, const LockedPath& what = {});
  RunLock() = default;
  RunLock(RunLock&& o) noexcept : path_(std::move(o.path_)) { o.path_.clear(); }
  RunLock& operator=(RunLock&& o) noexcept;
  ~RunLock();  // releases
  const std::string& path() const { return path_; }

 private:
  explicit RunLock(std::string path) : path_(std::move(path)) {}
  std::string path_;  // empty: not held
};

// The lock file of a run folder ("runs/x" and "runs/x/" -> "<cwd>/runs/x.lock"), beside the
// folder's real path: a symlink to the folder shares its lock.
std::string run_lock_path(const std::string& run_dir);

}  // namespace dit

// The run-folder lock in one process: taken, refused while held (naming this host and pid),
// released by its destructor, the same lock for "dir" and "dir/", a dead holder's lock taken over.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "run/run_lock.h"
#include "core/error.h"

namespace dit {
namespace {

namespace fs = std::filesystem;

fs::path scratch() {
  const fs::path p = fs::temp_directory_path() / ("dit_run_lock_" + std::to_string(getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

TEST(RunLock, RefusedWhileHeldAndReleasedAfter) {
  const fs::path d = scratch();
  const std::string run = (d / "run").string();
  EXPECT_EQ(run_lock_path(run + "/"), run + ".lock");
  {
    RunLock held = RunLock::acquire(run);
    EXPECT_TRUE(fs::exists(run + ".lock"));
    try {
      RunLock::acquire(run + "/");
      FAIL() << "a second lock of a held folder was granted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("is in use by another run (host "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("pid " + std::to_string(getpid()) + ","), std::string::npos) << e.what();
    }
  }
  EXPECT_FALSE(fs::exists(run + ".lock"));
  RunLock again = RunLock::acquire(run);  // free again
  fs::remove_all(d);
}

TEST(RunLock, TakesOverTheLockOfADeadProcess) {
  const fs::path d = scratch();
  const std::string run = (d / "run").string();
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);  // its pid now names no process
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::ofstream(run + ".lock") << "host=" << host << "\npid=" << child << "\nstart_ticks=\njob_id=\nrestart_count=0\nstarted=0\n";
  std::string note;
  RunLock lock = RunLock::acquire(run, &note);
  EXPECT_NE(note.find("process " + std::to_string(child) + " no longer runs"), std::string::npos) << note;
  std::ifstream in(run + ".lock");
  std::string first;
  std::getline(in, first);
  EXPECT_EQ(first, std::string("host=") + host);
  fs::remove_all(d);
}

// A lock file whose lines are not a holder's (a user's file, a damaged one) is named as not dit_mp's,
// showing what it holds, and left in place: never "host , pid , since 1970" (issue 53).
TEST(RunLock, ForeignLockIsNamedNotJudged) {
  const fs::path d = scratch();
  const std::string run = (d / "run").string();
  for (const std::string& text : {std::string("garbage\n"), std::string(), std::string("host=x\npid=abc\nstarted=1\n")}) {
    std::ofstream(run + ".lock") << text;
    try {
      RunLock::acquire(run);
      FAIL() << "a foreign lock file was taken over: '" << text << "'";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("run folder " + run + ": its lock file " + run + ".lock is not dit_mp's lock ("), std::string::npos) << m;
      EXPECT_NE(m.find(text.empty() ? "it is empty" : "it holds \""), std::string::npos) << m;
      EXPECT_EQ(m.find("1970"), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
    EXPECT_TRUE(fs::exists(run + ".lock"));
  }
  fs::remove_all(d);
}

}  // namespace
}  // namespace dit

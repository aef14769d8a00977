// The atomic file writer (io/atomic_file.h) with real processes, real kills and a real full disk:
// a writer killed with SIGKILL in the middle of a large write leaves the previous file intact and no
// temporary (an unnamed file: at once; a named temporary: gone after the next write of the same
// target), a failed fill leaves nothing, and folder targets are refused before anything is written.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "io/atomic_file.h"
#include "io_test_util.h"

namespace dit {
namespace {

using namespace io_test;

// The offset of the first file the process `pid` has open under `dir` (its unnamed file shows as
// "<dir>/#<inode> (deleted)"), or -1.
long long open_file_offset(pid_t pid, const fs::path& dir) {
  std::error_code ec;
  const fs::path fds = "/proc/" + std::to_string(pid) + "/fd";
  for (const auto& e : fs::directory_iterator(fds, ec)) {
    const fs::path target = fs::read_symlink(e.path(), ec);
    if (ec || target.string().rfind(dir.string() + "/", 0) != 0) continue;
    std::ifstream info("/proc/" + std::to_string(pid) + "/fdinfo/" + e.path().filename().string());
    std::string key;
    long long pos = -1;
    while (info >> key)
      if (key == "pos:" && info >> pos) return pos;
  }
  return -1;
}

// Kills `pid` with SIGKILL once `ready()` holds (polled every millisecond, 60 s at most); returns
// whether it was killed rather than found finished.
bool kill_when(pid_t pid, const std::function<bool()>& ready) {
  for (int i = 0; i < 60000; ++i) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return false;  // it finished first
    if (ready()) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return false;
}

TEST(AtomicFile, WritesAndReplacesLeavingNothingElse) {
  Scratch dir("atomic");
  const std::string path = dir / "latest";
  write_file_atomic(path, "step_00000001\n", "checkpoint pointer");
  EXPECT_EQ(read_all(path), "step_00000001\n");
  write_file_atomic(path, "", "checkpoint pointer");  // an empty file is a file like any other
  EXPECT_EQ(read_all(path), "");
  write_file_atomic(path, std::string(3 << 20, 'x'), "checkpoint pointer");
  EXPECT_EQ(fs::file_size(path), std::uintmax_t(3 << 20));
  write_atomically(path, "dataset", [](const std::string& tmp) { write_plain(tmp, "filled"); });
  EXPECT_EQ(read_all(path), "filled");
  EXPECT_EQ(listing(dir.path), std::vector<std::string>{"latest"});
}

TEST(AtomicFile, FolderAndMissingFolderRefusedBeforeAnythingIsWritten) {
  Scratch dir("atomic");
  fs::create_directory(dir.path / "out.json");
  std::string msg = error_of([&] { write_file_atomic(dir / "out.json", "{}", "metrics"); });
  EXPECT_NE(msg.find("metrics " + (dir / "out.json") + ": cannot write (Is a directory"), std::string::npos) << msg;
  bool filled = false;
  msg = error_of([&] { write_atomically(dir / "out.json", "dataset", [&](const std::string&) { filled = true; }); });
  EXPECT_NE(msg.find("Is a directory"), std::string::npos) << msg;
  EXPECT_FALSE(filled);
  msg = error_of([&] { write_file_atomic(dir / "no/such/x.h5", "x", "samples"); });
  EXPECT_NE(msg.find("samples " + (dir / "no/such/x.h5") + ": cannot write (No such file or directory"),
            std::string::npos)
      << msg;
  EXPECT_NE(error_of([&] { check_writable_target("/dev/null", "PNG"); }).find("not a regular file"), std::string::npos);
  EXPECT_NE(error_of([&] { check_writable_target("", "PNG"); }).find("no file name"), std::string::npos);
  EXPECT_EQ(listing(dir.path), std::vector<std::string>{"out.json"});
  EXPECT_TRUE(fs::is_empty(dir.path / "out.json"));
}

TEST(AtomicFile, FailedFillRemovesTheTemporaryAndNamesTheTarget) {
  Scratch dir("atomic");
  const std::string path = dir / "data.h5";
  write_plain(path, "previous");
  std::string seen;
  const std::string msg = error_of([&] {
    write_atomically(path, "dataset", [&](const std::string& tmp) {
      seen = tmp;
      write_plain(tmp, "half");
      DIT_FAIL(tmp, ": cannot write samples 0..9 (Input/output error)");
    });
  });
  EXPECT_EQ(seen, temporary_name(path));
  EXPECT_NE(msg.find("dataset " + path + ": cannot write (" + path + ": cannot write samples 0..9 (Input/output error))"),
            std::string::npos)
      << msg;
  EXPECT_EQ(msg.find(".tmp-"), std::string::npos) << msg;
  // An input found bad while filling is its own error, passed through unchanged.
  const std::string input = error_of([&] {
    write_atomically(path, "dataset", [&](const std::string& tmp) {
      write_plain(tmp, "half");
      DIT_FAIL("/data/f/7.npy: shape (1, 4, 2, 2), expected (1, 4, 2, 3)");
    });
  });
  EXPECT_EQ(input.rfind("/data/f/7.npy: shape", 0), 0u) << input;
  EXPECT_EQ(read_all(path), "previous");
  EXPECT_EQ(listing(dir.path), std::vector<std::string>{"data.h5"});
}

// SIGKILL while 256 MiB are being written (the child has the unnamed file open at an offset past
// 0): the previous file is intact and the folder holds nothing else, at once.
TEST(AtomicFile, KilledMidwayLeavesThePreviousFileAndNoTemporary) {
  Scratch dir("atomic_kill");
  const std::string path = dir / "ema.h5";
  write_plain(path, "previous weights");
  const std::string big(std::size_t(256) << 20, 'w');
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      write_file_atomic(path, big, "weights");
    } catch (...) {
      ::_exit(2);
    }
    ::_exit(0);
  }
  long long offset = -1;
  const bool killed = kill_when(pid, [&] { return (offset = open_file_offset(pid, dir.path)) > 0; });
  ASSERT_TRUE(killed) << "the write finished before it could be killed midway";
  EXPECT_LT(offset, (long long)big.size()) << "killed at " << offset;
  std::printf("killed at byte %lld of %zu\n", offset, big.size());
  EXPECT_EQ(read_all(path), "previous weights");
  EXPECT_EQ(listing(dir.path), std::vector<std::string>{"ema.h5"});
  write_file_atomic(path, "new weights", "weights");
  EXPECT_EQ(read_all(path), "new weights");
}

// SIGKILL while a library fills a named temporary: the previous file is intact; the temporary of
// the dead writer is removed by the next write of the same target, while those of live processes
// and of other hosts are left alone.
TEST(AtomicFile, KilledDuringAFillItsTemporaryGoesWithTheNextWrite) {
  Scratch dir("atomic_kill");
  const std::string path = dir / "fm.h5";
  write_plain(path, "previous dataset");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      write_atomically(path, "dataset", [](const std::string& tmp) {
        std::ofstream out(tmp, std::ios::binary);
        const std::string block(1 << 20, 'd');
        for (;;) {  // a slow fill, killed midway
          out.write(block.data(), block.size());
          out.flush();
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      });
    } catch (...) {
      ::_exit(2);
    }
    ::_exit(0);
  }
  const std::string mine = temporary_name(path);  // "<path>.tmp-<host>-<pid>"
  const std::string prefix = mine.substr(0, mine.rfind('-') + 1);
  const std::string child_tmp = prefix + std::to_string(pid);
  std::error_code ec;
  ASSERT_TRUE(kill_when(pid, [&] { return fs::file_size(child_tmp, ec) > (4u << 20) && !ec; }));
  EXPECT_EQ(read_all(path), "previous dataset");
  const std::string live = prefix + "1";  // pid 1 runs
  const std::string other_host = path + ".tmp-elsewhere-" + std::to_string(pid);
  write_plain(live, "a live writer's");
  write_plain(other_host, "another host's");
  EXPECT_EQ(listing(dir.path).size(), 4u);
  write_atomically(path, "dataset", [](const std::string& t) { write_plain(t, "new dataset"); });
  EXPECT_EQ(read_all(path), "new dataset");
  EXPECT_FALSE(fs::exists(child_tmp));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(other_host));
}

TEST(AtomicFile, FullDiskFailsInOneLineKeepingThePreviousFile) {
  Scratch root("atomic_full");
  const Tmpfs disk(root / "disk", "128k");
  if (!disk.mounted) GTEST_SKIP() << disk.why;
  const std::string path = disk.dir + "/COMPLETE";
  write_plain(path, "step 1");
  disk.fill(16 << 10);
  for (const std::size_t size : {std::size_t(64) << 10, std::size_t(8) << 20}) {
    const std::string msg = error_of([&] { write_file_atomic(path, std::string(size, 'c'), "checkpoint marker"); });
    EXPECT_NE(msg.find("checkpoint marker " + path + ": cannot write (No space left on device"), std::string::npos)
        << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos);
    const std::string fill_msg = error_of([&] {
      write_atomically(path, "dataset", [&](const std::string& tmp) {
        std::ofstream out(tmp, std::ios::binary);
        out << std::string(size, 'd');
        out.flush();
        DIT_CHECK(out.good(), tmp, ": cannot write");
      });
    });
    EXPECT_NE(fill_msg.find("dataset " + path + ": cannot write"), std::string::npos) << fill_msg;
    EXPECT_NE(fill_msg.find("No space left on device"), std::string::npos) << fill_msg;
    EXPECT_EQ(read_all(path), "step 1");
    EXPECT_EQ(listing(disk.dir), (std::vector<std::string>{"COMPLETE", "filler"}));
  }
}

TEST(AtomicFile, FsyncNamesTheFileAndTheCause) {
  Scratch dir("atomic");
  fsync_folder(dir.path.string(), "checkpoint folder");
  write_plain(dir / "shard.h5", "x");
  fsync_file(dir / "shard.h5", "checkpoint shard");
  const std::string msg = error_of([&] { fsync_file(dir / "nope.h5", "checkpoint shard"); });
  EXPECT_NE(msg.find("checkpoint shard " + (dir / "nope.h5") + ": cannot write (No such file or directory"),
            std::string::npos)
      << msg;
}

}  // namespace
}  // namespace dit

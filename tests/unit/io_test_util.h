// Shared pieces of the file-writing tests: a scratch folder, a small tmpfs that can be filled up
// (mounted only when the test runs as root; otherwise the test says why it skips), and readers of
// what a folder holds after a write.
#pragma once

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace dit::io_test {

namespace fs = std::filesystem;

// A fresh folder, removed afterwards.
struct Scratch {
  fs::path path;
  explicit Scratch(const std::string& tag) {
    static int counter = 0;
    path = fs::temp_directory_path() / ("dit_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// The names in a folder, sorted.
inline std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

inline std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_plain(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// The message of the dit::Error that f throws ("" if it throws none).
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A tmpfs of `size` (mount's syntax, "256k") at `dir`, unmounted at the end; `why` says why not.
struct Tmpfs {
  std::string dir, why;
  bool mounted = false;
  Tmpfs(const std::string& where, const std::string& size) : dir(where) {
    fs::create_directories(dir);
    const std::string opts = "size=" + size;
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, opts.c_str()) == 0)
      mounted = true;
    else
      why = std::string("cannot mount a tmpfs here (") + std::strerror(errno) +
            "); run as root to test full disks";
  }
  ~Tmpfs() {
    if (mounted) ::umount2(dir.c_str(), MNT_DETACH);
  }
  // Fills the file system with the file `filler` until at most `leave` bytes could still be written.
  void fill(std::size_t leave) const {
    std::ofstream f(dir + "/filler", std::ios::binary);
    const std::string block(4096, 'f');
    for (std::size_t i = 0; i < (std::size_t(1) << 20); ++i) {
      f.write(block.data(), block.size());
      f.flush();
      if (!f) break;
    }
    f.close();
    if (leave > 0) fs::resize_file(dir + "/filler", fs::file_size(dir + "/filler") - leave);
  }
};

}  // namespace dit::io_test

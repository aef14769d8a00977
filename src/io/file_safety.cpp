// Writability probes and readable OS errors (see file_safety.h).
#include "io/file_safety.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace dit {

namespace fs = std::filesystem;

std::string describe_errno(int err) {
  std::string s = std::strerror(err);
  if (err == ENOSPC) s += " (the disk is full)";
  if (err == EDQUOT) s += " (the disk quota is used up)";
  if (err == EROFS) s += " (the file system is mounted read-only)";
  if (err == EACCES || err == EPERM) s += " (no write permission)";
  return s;
}

namespace {

// What a file that is not regular is, for messages ("" for a regular file).
const char* not_regular(mode_t mode) {
  if (S_ISREG(mode)) return "";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISSOCK(mode)) return "a socket";
  return "a device";
}

[[noreturn]] void refuse(const std::string& path, const std::string& what, const char* is) {
  DIT_FAIL(what, " ", path, " is ", is, ", expected a regular file: dit_mp reads only regular files (a FIFO or "
           "device would block it); move it away");
}

}  // namespace

int open_regular(const std::string& path, const std::string& what, int flags) {
  const int fd = ::open(path.c_str(), flags | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    refuse(path, what, not_regular(st.st_mode));
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

void require_regular(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;  // missing: the reader says so
  if (*not_regular(st.st_mode)) refuse(path, what, not_regular(st.st_mode));
}

std::string not_a_regular_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0)
    return S_ISREG(st.st_mode) ? "" : std::string(not_regular(st.st_mode)) + ", not a regular file (dit_mp reads only "
                                                                             "regular files: a FIFO or device would block it)";
  const int err = errno;
  std::error_code ec;
  if (fs::is_symlink(path, ec))
    return "a symbolic link to " + fs::read_symlink(path, ec).string() + ", which does not exist";
  return std::string("cannot be read (") + std::strerror(err) + ")";
}

std::string read_regular(const std::string& path, const std::string& what) {
  const int fd = open_regular(path, what);
  if (fd < 0) return "";
  std::string out;
  char buf[1 << 16];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, std::size_t(n));
  ::close(fd);
  return out;
}

void probe_writable(const std::string& dir, const std::string& what, const std::string& probe_name) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) DIT_FAIL(what, " = ", dir, ": cannot create the folder: ", describe_errno(ec.value()));
  DIT_CHECK(fs::is_directory(dir), what, " = ", dir, " is not a folder");
  const std::string probe = (fs::path(dir) / (".write-probe-" + probe_name)).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) DIT_FAIL(what, " = ", dir, " is not writable: ", describe_errno(errno));
  const char byte = 0;
  const bool wrote = ::write(fd, &byte, 1) == 1;
  const int write_errno = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  if (!wrote) DIT_FAIL(what, " = ", dir, " is not writable: ", describe_errno(write_errno));
}

std::string write_failure_cause(const std::string& path) {
  const fs::path p(path);
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return describe_errno(errno);
  if (st.f_flag & ST_RDONLY) return describe_errno(EROFS);
  const unsigned long long avail = static_cast<unsigned long long>(st.f_bavail) * st.f_frsize;
  if (avail < (1ull << 20))
    return describe_errno(ENOSPC) + ": " + std::to_string(avail) + " bytes free on " + dir;
  if (::access(dir.c_str(), W_OK) != 0) return describe_errno(errno);
  return "";
}

}  // namespace dit

// The atomic file writer (see atomic_file.h): unnamed O_TMPFILE files linked into place, named
// temporaries with their stale-temporary sweep, fsync of file and folder, one-line errors.
#include "io/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/file_safety.h"

namespace dit {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kWriteChunk = std::size_t(8) << 20;  // bytes per write(2): a kill lands between

// Closes a file descriptor when it goes out of scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

[[noreturn]] void fail(const std::string& what, const std::string& path, const std::string& cause) {
  DIT_FAIL(what, " ", path, ": cannot write (", cause, ")");
}

std::string folder_of(const std::string& path) {
  const fs::path p(path);
  return p.has_parent_path() ? p.parent_path().string() : ".";
}

// The host part of a temporary's name: the host name with anything but [A-Za-z0-9._] as '_'.
std::string host_tag() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0 || !*buf) return "host";
  std::string h(buf);
  for (char& c : h)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_')) c = '_';
  return h;
}

bool write_all(int fd, const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const std::size_t chunk = std::min<std::size_t>(bytes.size() - done, kWriteChunk);
    const ssize_t n = ::write(fd, bytes.data() + done, chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// Gives the unnamed file `fd` the name `name` (through /proc, which needs no privilege, else
// AT_EMPTY_PATH, which needs CAP_DAC_READ_SEARCH). Returns 0 or an errno value.
int link_unnamed(int fd, const std::string& name) {
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) == 0) return 0;
  const int proc_errno = errno;
  if (::linkat(fd, "", AT_FDCWD, name.c_str(), AT_EMPTY_PATH) == 0) return 0;
  return proc_errno;
}

// A library's error message as the cause of a failed fill: without our "[file:line]" suffix and
// with the temporary's name replaced by the target's. A message that names no cause is completed
// from the file system's state (a full or read-only disk) when that explains it.
std::string fill_cause(std::string msg, const std::string& tmp, const std::string& path) {
  const auto bracket = msg.rfind(" [");
  if (bracket != std::string::npos && msg.back() == ']') msg.resize(bracket);
  for (std::size_t at = msg.find(tmp); at != std::string::npos; at = msg.find(tmp, at + path.size()))
    msg.replace(at, tmp.size(), path);
  const std::string same = path + ": cannot write (";  // said already by the caller's message
  if (msg.rfind(same, 0) == 0 && msg.back() == ')') msg = msg.substr(same.size(), msg.size() - same.size() - 1);
  const int known[] = {ENOSPC, EDQUOT, EIO, EROFS, EACCES, EFBIG};
  for (const int e : known)
    if (msg.find(std::strerror(e)) != std::string::npos) return msg;
  const std::string disk = write_failure_cause(path);
  return disk.empty() ? msg : msg + "; " + disk;
}

}  // namespace

std::string temporary_name(const std::string& path) {
  return path + ".tmp-" + host_tag() + "-" + std::to_string(::getpid());
}

int remove_stale_temporaries(const std::string& path) {
  const std::string prefix = fs::path(path).filename().string() + ".tmp-" + host_tag() + "-";
  int removed = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(folder_of(path), ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (pid == ::getpid() || pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code rm;
    if (e.is_regular_file(rm) && fs::remove(e.path(), rm)) ++removed;
  }
  return removed;
}

void check_writable_target(const std::string& path, const std::string& what) {
  if (path.empty()) DIT_FAIL(what, ": cannot write (no file name given)");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {  // follows links: a link to a folder is a folder
    if (S_ISDIR(st.st_mode)) fail(what, path, describe_errno(EISDIR) + ": it is a folder, expected a file name");
    if (!S_ISREG(st.st_mode))
      fail(what, path, "it exists and is not a regular file (a device, pipe or socket), so it is not replaced");
  }
  const std::string dir = folder_of(path);
  if (::stat(dir.c_str(), &st) != 0)
    fail(what, path, describe_errno(errno) + ": the folder " + dir + " does not exist");
  if (!S_ISDIR(st.st_mode)) fail(what, path, describe_errno(ENOTDIR) + ": " + dir + " is not a folder");
}

void fsync_file(const std::string& path, const std::string& what) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0 || ::fsync(f.fd) != 0) fail(what, path, describe_errno(errno));
}

void fsync_folder(const std::string& path, const std::string& what) {
  Fd f{::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (f.fd < 0 || (::fsync(f.fd) != 0 && errno != EINVAL)) fail(what, path, describe_errno(errno));
}

void write_file_atomic(const std::string& path, const std::string& bytes, const std::string& what) {
  check_writable_target(path, what);
  remove_stale_temporaries(path);
  const std::string dir = folder_of(path), tmp = temporary_name(path);
  std::string named;  // the temporary's name, once it has one
  auto give_up = [&](int err) {
    if (!named.empty()) ::unlink(named.c_str());
    fail(what, path, describe_errno(err));
  };
  Fd f{::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666)};
  if (f.fd < 0) {
    // Old kernels read O_TMPFILE as O_DIRECTORY (EISDIR); some file systems lack it (EOPNOTSUPP).
    if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) give_up(errno);
    ::unlink(tmp.c_str());
    f.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (f.fd < 0) give_up(errno);
    named = tmp;
  }
  if (!write_all(f.fd, bytes) || ::fsync(f.fd) != 0) give_up(errno);
  if (named.empty()) {
    ::unlink(tmp.c_str());
    if (const int err = link_unnamed(f.fd, tmp)) give_up(err);
    named = tmp;
  }
  if (::rename(named.c_str(), path.c_str()) != 0) give_up(errno);
  named.clear();
  fsync_folder(dir, what);
}

void write_atomically(const std::string& path, const std::string& what,
                      const std::function<void(const std::string& tmp_path)>& fill) {
  check_writable_target(path, what);
  remove_stale_temporaries(path);
  const std::string tmp = temporary_name(path);
  ::unlink(tmp.c_str());
  try {
    fill(tmp);
  } catch (const Error& e) {
    ::unlink(tmp.c_str());
    // An error about another file (an input found bad while filling) is not a failed write.
    if (std::string(e.what()).find(tmp) == std::string::npos) throw;
    fail(what, path, fill_cause(e.what(), tmp, path));
  } catch (const std::exception& e) {
    ::unlink(tmp.c_str());
    fail(what, path, fill_cause(e.what(), tmp, path));
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  struct stat st {};
  int err = ::lstat(tmp.c_str(), &st) != 0 ? errno : S_ISREG(st.st_mode) ? 0 : EINVAL;
  if (!err) {
    Fd f{::open(tmp.c_str(), O_RDONLY | O_CLOEXEC)};
    if (f.fd < 0 || ::fsync(f.fd) != 0) err = errno;
  }
  if (!err && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err) {
    ::unlink(tmp.c_str());
    fail(what, path, describe_errno(err));
  }
  fsync_folder(folder_of(path), what);
}

}  // namespace dit

// Sealed HDF5 files (see sealed_h5.h).
#include "io/sealed_h5.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "io/file_safety.h"

namespace dit::h5 {

namespace {
constexpr const char* kMagic = "dit_mp sealed hdf5 1\n";

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// CRC-32 and length of the bytes of `fd` from offset kSealBytes to the end.
void sum_after_block(int fd, const std::string& path, unsigned long long& size, unsigned& crc) {
  std::vector<unsigned char> buf(1 << 20);
  uLong c = crc32(0L, Z_NULL, 0);
  size = 0;
  off_t at = static_cast<off_t>(kSealBytes);
  for (;;) {
    const ssize_t n = ::pread(fd, buf.data(), buf.size(), at);
    DIT_CHECK(n >= 0, path, ": read error while checking its seal");
    if (n == 0) break;
    c = crc32(c, buf.data(), static_cast<uInt>(n));
    size += static_cast<unsigned long long>(n);
    at += n;
  }
  crc = static_cast<unsigned>(c);
}

// The seal's text for `size` bytes after the user block with CRC-32 `crc`, padded to kSealBytes.
std::string seal_header(unsigned long long size, unsigned crc) {
  char header[kSealBytes] = {0};
  std::snprintf(header, sizeof header, "%ssize %llu\ncrc32 %08x\n", kMagic, size, crc);
  return std::string(header, sizeof header);
}
}  // namespace

hid_t sealed_fcpl() {
  const hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
  DIT_CHECK(fcpl >= 0 && H5Pset_userblock(fcpl, kSealBytes) >= 0, "HDF5: cannot reserve a user block");
  return fcpl;
}

void seal_file(const std::string& path) {
  Fd f{::open(path.c_str(), O_RDWR)};
  DIT_CHECK(f.fd >= 0, path, ": cannot open to seal it");
  unsigned long long size = 0;
  unsigned crc = 0;
  sum_after_block(f.fd, path, size, crc);
  const std::string header = seal_header(size, crc);
  DIT_CHECK(::pwrite(f.fd, header.data(), header.size(), 0) == static_cast<ssize_t>(header.size()) &&
                ::fsync(f.fd) == 0,
            path, ": cannot write its seal (", std::strerror(errno), ")");
}

void seal_image(std::string& bytes, const std::string& where) {
  DIT_CHECK(bytes.size() > kSealBytes, where, ": an HDF5 image of ", bytes.size(), " bytes has no room for a seal");
  const auto* data = reinterpret_cast<const Bytef*>(bytes.data()) + kSealBytes;
  uLong c = crc32(0L, Z_NULL, 0);
  for (std::size_t at = 0, left = bytes.size() - kSealBytes; left > 0;) {  // crc32 takes 32-bit lengths
    const uInt n = static_cast<uInt>(std::min<std::size_t>(left, std::size_t(1) << 30));
    c = crc32(c, data + at, n);
    at += n, left -= n;
  }
  bytes.replace(0, kSealBytes, seal_header(bytes.size() - kSealBytes, static_cast<unsigned>(c)));
}

void verify_seal(const std::string& path, const std::string& remedy) { static_cast<void>(verified_crc32(path, remedy)); }

std::uint32_t verified_crc32(const std::string& path, const std::string& remedy) {
  Fd f{open_regular(path, "the sealed file")};
  DIT_CHECK(f.fd >= 0, path, ": cannot open (", std::strerror(errno), ")");
  char header[kSealBytes + 1] = {0};
  const ssize_t n = ::pread(f.fd, header, kSealBytes, 0);
  const std::size_t magic = std::strlen(kMagic);
  DIT_CHECK(n == static_cast<ssize_t>(kSealBytes) && std::memcmp(header, kMagic, magic) == 0, path,
            ": no dit_mp seal (the size and checksum of the file, in its first 512 bytes), so it cannot be "
            "verified before HDF5 reads it; ", remedy);
  unsigned long long want_size = 0;
  unsigned want_crc = 0;
  DIT_CHECK(std::sscanf(header + magic, "size %llu\ncrc32 %8x\n", &want_size, &want_crc) == 2, path,
            ": its seal (first 512 bytes) is damaged");
  // A file this process verified and that has not changed since (same inode, size, mtime and
  // ctime) is not read again: a run opens its teacher once per layout it considers, then loads it.
  // Only files last changed over 2 s before their check are remembered: a change after the check
  // then gets a later timestamp, even where timestamps are coarser than the clock.
  struct stat st {};
  DIT_CHECK(::fstat(f.fd, &st) == 0, path, ": cannot stat (", std::strerror(errno), ")");
  using Key = std::tuple<dev_t, ino_t, off_t, long, long, long, long>;
  const Key key{st.st_dev, st.st_ino, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec, st.st_ctim.tv_sec,
                st.st_ctim.tv_nsec};
  static std::mutex mu;
  static std::map<Key, unsigned> verified;
  {
    std::lock_guard<std::mutex> lock(mu);
    const auto it = verified.find(key);
    if (it != verified.end() && it->second == want_crc) return want_crc;
  }
  unsigned long long size = 0;
  unsigned crc = 0;
  sum_after_block(f.fd, path, size, crc);
  DIT_CHECK(size == want_size, path, ": ", size + kSealBytes, " bytes, but its seal records ", want_size + kSealBytes,
            ": the file is truncated or damaged");
  DIT_CHECK(crc == want_crc, path, ": its contents do not match the CRC-32 in its seal: the file is damaged");
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  if (now.tv_sec - st.st_mtim.tv_sec > 2 && now.tv_sec - st.st_ctim.tv_sec > 2) {
    std::lock_guard<std::mutex> lock(mu);
    verified[key] = crc;
  }
  return crc;
}

}  // namespace dit::h5

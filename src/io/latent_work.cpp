// The work folder of a resumable latent preparation (see latent_work.h): the settings file, the
// parts' records, their scan (with the torn tail cut off) and their values read back, checked.
#include "io/latent_work.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/file_safety.h"

namespace dit {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little, "the parts are little-endian, as the host");

namespace {

constexpr char kMagic[8] = {'D', 'I', 'T', 'L', 'R', 'E', 'C', '1'};
constexpr std::size_t kHeadBytes = 8 + 8 + 8 + 4 * 4;
constexpr const char* kSettings = "settings.txt";

std::string part_name(int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "part-%05d.bin", rank);
  return name;
}

bool is_part(const std::string& name) {
  return name.size() == 14 && name.rfind("part-", 0) == 0 && name.substr(10) == ".bin";
}

std::uint32_t crc_of(const char* p, std::size_t n, std::uint32_t crc = 0) {
  uLong c = crc;
  while (n > 0) {
    const uInt chunk = uInt(std::min<std::size_t>(n, std::size_t(1) << 30));
    c = crc32(c, reinterpret_cast<const Bytef*>(p), chunk);
    p += chunk;
    n -= chunk;
  }
  return std::uint32_t(c);
}

template <class T>
void put(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <class T>
T get(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::string read_text(const std::string& path) { return read_regular(path, "the work folder's file"); }

// The header of the record at `offset` of the part `fd` (of `size` bytes), or false when there is
// no whole, plausible header there.
bool read_head(int fd, std::uint64_t offset, std::uint64_t size, LatentRecord& r, std::uint64_t& problem_bytes) {
  char head[kHeadBytes];
  if (offset + kHeadBytes > size || ::pread(fd, head, kHeadBytes, off_t(offset)) != ssize_t(kHeadBytes)) return false;
  if (std::memcmp(head, kMagic, 8) != 0) return false;
  r.batch = std::int64_t(get<std::uint64_t>(head + 8));
  r.files_digest = get<std::uint64_t>(head + 16);
  const std::uint32_t files = get<std::uint32_t>(head + 24);
  r.samples = get<std::uint32_t>(head + 28);
  r.sample_floats = get<std::uint32_t>(head + 32);
  problem_bytes = get<std::uint32_t>(head + 36);
  if (files > (1u << 20) || r.samples > 2 * std::int64_t(files) || r.sample_floats > (1 << 26) ||
      problem_bytes > (std::uint64_t(files) * 2 + (1u << 24)))
    return false;
  r.problems.assign(files, "");
  r.offset = offset;
  r.bytes = kHeadBytes + problem_bytes + std::uint64_t(r.samples) * std::uint64_t(r.sample_floats) * 4 + 4;
  return offset + r.bytes <= size;
}

// The problems' bytes of a record into r.problems; false when they do not parse.
bool parse_problems(const std::string& bytes, LatentRecord& r) {
  std::size_t at = 0;
  for (std::string& p : r.problems) {
    if (at + 2 > bytes.size()) return false;
    const std::size_t len = get<std::uint16_t>(bytes.data() + at);
    if (at + 2 + len > bytes.size()) return false;
    p.assign(bytes.data() + at + 2, len);
    at += 2 + len;
  }
  return at == bytes.size();
}

std::string read_at(int fd, std::uint64_t offset, std::uint64_t n) {
  std::string s(n, '\0');
  std::uint64_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd, s.data() + done, n - done, off_t(offset + done));
    if (got <= 0) return {};
    done += std::uint64_t(got);
  }
  return s;
}

// "key value" lines into (key, value) pairs, in order.
std::vector<std::pair<std::string, std::string>> lines_of(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const std::size_t sp = line.find(' ');
    out.emplace_back(line.substr(0, sp), sp == std::string::npos ? "" : line.substr(sp + 1));
  }
  return out;
}

}  // namespace

std::uint64_t fnv1a64(const std::string& bytes, std::uint64_t h) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::uint32_t file_crc32(const std::string& path) {
  require_regular(path, "the file");
  std::ifstream in(path, std::ios::binary);
  DIT_CHECK(in.good(), path, ": cannot read (", describe_errno(errno), ")");
  std::vector<char> buf(std::size_t(4) << 20);
  std::uint32_t crc = 0;
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    crc = crc_of(buf.data(), std::size_t(in.gcount()), crc);
  }
  DIT_CHECK(in.eof(), path, ": cannot read (", describe_errno(errno), ")");
  return crc;
}

LatentWork::LatentWork(const std::string& out, std::string settings)
    : folder_(folder_of(out)), settings_(std::move(settings)) {}

LatentWork::~LatentWork() {
  if (fd_ >= 0) ::close(fd_);
}

std::int64_t LatentWork::prepare() {
  const std::string settings_path = (fs::path(folder_) / kSettings).string();
  // A folder without settings is one a run created and was stopped in before writing them.
  const bool fresh = !fs::exists(folder_) || (fs::is_directory(folder_) && fs::is_empty(folder_));
  if (fresh) {
    std::error_code ec;
    fs::create_directory(folder_, ec);
    DIT_CHECK(fs::is_directory(folder_), folder_, ": cannot create the work folder (", ec.message(), ")");
    write_file_atomic(settings_path, settings_, "the work folder's settings");
    fsync_folder(fs::path(folder_).parent_path().empty() ? "." : fs::path(folder_).parent_path().string(),
                 "the work folder");
    return 0;
  }
  DIT_CHECK(fs::is_directory(folder_) && fs::is_regular_file(settings_path), folder_,
            " is in the way: the work folder of an unfinished preparation holds ", kSettings,
            "; move it away or choose another --out");
  for (const auto& e : fs::directory_iterator(folder_)) {
    const std::string name = e.path().filename().string();
    if (name == kSettings || is_part(name)) continue;
    if (name.rfind(std::string(kSettings) + ".tmp-", 0) == 0) continue;  // a settings write cut short
    DIT_FAIL(folder_, " holds ", name, ", which dit_mp did not write; move it away or choose another --out");
  }
  remove_stale_temporaries(settings_path);
  const auto theirs = lines_of(read_text(settings_path)), ours = lines_of(settings_);
  for (std::size_t i = 0; i < std::max(theirs.size(), ours.size()); ++i) {
    const std::string key = i < ours.size() ? ours[i].first : theirs[i].first;
    const std::string there = i < theirs.size() ? theirs[i].second : "(none)";
    const std::string here = i < ours.size() ? ours[i].second : "(none)";
    DIT_CHECK(i < theirs.size() && i < ours.size() && theirs[i].first == ours[i].first && there == here, folder_,
              " holds the unfinished work of a preparation with other settings: ", key, " ", there, " there, ", here,
              " here; rerun that command to finish it, or remove ", folder_, " to start afresh");
  }
  return std::int64_t(scan(TornTail::Cut).size());
}

std::vector<LatentRecord> LatentWork::scan(TornTail torn) const {
  std::vector<std::string> parts;
  for (const auto& e : fs::directory_iterator(folder_))
    if (is_part(e.path().filename().string())) parts.push_back(e.path().string());
  std::sort(parts.begin(), parts.end());
  std::vector<LatentRecord> out;
  for (const std::string& part : parts) {
    const int fd = open_regular(part, "the work folder's part", torn == TornTail::Cut ? O_RDWR : O_RDONLY);
    DIT_CHECK(fd >= 0, part, ": cannot open (", describe_errno(errno), ")");
    struct stat st{};
    ::fstat(fd, &st);
    const std::uint64_t size = std::uint64_t(st.st_size);
    std::uint64_t offset = 0;
    while (offset < size) {
      LatentRecord r;
      std::uint64_t problem_bytes = 0;
      bool whole = read_head(fd, offset, size, r, problem_bytes);
      std::string problems;
      if (whole) {
        problems = read_at(fd, offset + kHeadBytes, problem_bytes);
        whole = problems.size() == problem_bytes && parse_problems(problems, r);
      }
      // The last record alone can be torn: its CRC is checked here, the others' as they are read.
      if (whole && offset + r.bytes == size) {
        const std::string all = read_at(fd, offset, r.bytes);
        whole = all.size() == r.bytes && crc_of(all.data(), all.size() - 4) == get<std::uint32_t>(all.data() + all.size() - 4);
      }
      if (!whole) {
        if (torn == TornTail::Cut) {
          DIT_CHECK(::ftruncate(fd, off_t(offset)) == 0 && ::fsync(fd) == 0, part, ": cannot cut off its torn record (",
                    describe_errno(errno), ")");
          std::printf("%s: a record cut short at byte %llu (a run stopped while writing it) is dropped\n",
                      part.c_str(), static_cast<unsigned long long>(offset));
        }
        break;
      }
      r.part = part;
      out.push_back(std::move(r));
      offset += out.back().bytes;
    }
    ::close(fd);
  }
  return out;
}

void LatentWork::append(int rank, const LatentRecord& r, const float* values) {
  const std::string path = (fs::path(folder_) / part_name(rank)).string();
  if (fd_rank_ != rank) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    DIT_CHECK(fd_ >= 0, path, ": cannot write (", describe_errno(errno), ")");
    fd_rank_ = rank;
  }
  std::string rec(kMagic, 8);
  put<std::uint64_t>(rec, std::uint64_t(r.batch));
  put<std::uint64_t>(rec, r.files_digest);
  put<std::uint32_t>(rec, std::uint32_t(r.problems.size()));
  put<std::uint32_t>(rec, std::uint32_t(r.samples));
  put<std::uint32_t>(rec, std::uint32_t(r.sample_floats));
  std::string problems;
  for (const std::string& p : r.problems) {
    const std::string q = p.substr(0, 60000);
    put<std::uint16_t>(problems, std::uint16_t(q.size()));
    problems += q;
  }
  put<std::uint32_t>(rec, std::uint32_t(problems.size()));
  rec += problems;
  rec.append(reinterpret_cast<const char*>(values), std::size_t(r.samples * r.sample_floats) * sizeof(float));
  put<std::uint32_t>(rec, crc_of(rec.data(), rec.size()));
  // One write of the whole record (O_APPEND), then to disk before the batch counts as done.
  std::size_t done = 0;
  while (done < rec.size()) {
    const ssize_t n = ::write(fd_, rec.data() + done, rec.size() - done);
    if (n < 0 && errno == EINTR) continue;
    DIT_CHECK(n > 0, path, ": cannot write (", describe_errno(n == 0 ? EIO : errno), ")");
    done += std::size_t(n);
  }
  DIT_CHECK(::fdatasync(fd_) == 0, path, ": cannot write (", describe_errno(errno), ")");
}

std::vector<float> LatentWork::read_values(const LatentRecord& r) const {
  const int fd = open_regular(r.part, "the work folder's part");
  DIT_CHECK(fd >= 0, r.part, ": cannot open (", describe_errno(errno), ")");
  const std::string all = read_at(fd, r.offset, r.bytes);
  ::close(fd);
  DIT_CHECK(all.size() == r.bytes && crc_of(all.data(), all.size() - 4) == get<std::uint32_t>(all.data() + all.size() - 4),
            r.part, ": the record of batch ", r.batch, " at byte ", r.offset,
            " fails its CRC (a damaged part); remove the part to encode its batches again");
  std::vector<float> v(std::size_t(r.samples * r.sample_floats));
  std::memcpy(v.data(), all.data() + all.size() - 4 - v.size() * sizeof(float), v.size() * sizeof(float));
  return v;
}

void LatentWork::remove() const {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(folder_, ec)) {
    const std::string name = e.path().filename().string();
    if (name == kSettings || is_part(name) || name.rfind(std::string(kSettings) + ".tmp-", 0) == 0)
      fs::remove(e.path(), ec);
  }
  fs::remove(folder_, ec);  // fails, harmlessly, if anything else is there
}

}  // namespace dit

// The work folder of a resumable preparation of VAE latents (engine/image_latents.h): what each
// rank has finished, on disk as it goes, so that a killed preparation resumes where it stopped and
// the dataset is assembled from it in bounded memory. Beside the output, `<out>.parts/`:
//   settings.txt      the command's settings, "key value" lines, written first (atomically)
//   part-<r>.bin      the records world rank r appended, each flushed to disk (fdatasync)
// A record is one batch of source files and what became of them (little-endian):
//   "DITLREC1" | u64 batch | u64 files digest | u32 files | u32 samples | u32 floats per sample
//   | u32 problem bytes | per file: u16 length + its problem ("" when encoded)
//   | float32 values (samples x floats per sample) | u32 CRC-32 of all of the record before it
// Only a part's last record can be torn (a kill while appending); the scan that precedes a run cuts
// it off, and assembly checks every record's CRC as it reads its values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dit {

// One batch's record (its values travel apart: append takes them, read_values returns them).
struct LatentRecord {
  std::int64_t batch = 0;
  std::uint64_t files_digest = 0;     // of the batch's files (names, sizes, times, labels)
  std::vector<std::string> problems;  // one per file of the batch: "" when encoded, else why not
  std::int64_t samples = 0;           // latents stored: encoded files x copies (flips)
  std::int64_t sample_floats = 0;     // C x H x W of one latent
  // Where a scan found it.
  std::string part;
  std::uint64_t offset = 0, bytes = 0;
};

// What to do with a part's torn last record.
enum class TornTail { Cut, Keep };

class LatentWork {
 public:
  // The work folder of the output `out` ("<out>.parts"), for a command of settings `settings`
  // ("key value" lines).
  LatentWork(const std::string& out, std::string settings);
  ~LatentWork();
  LatentWork(const LatentWork&) = delete;
  LatentWork& operator=(const LatentWork&) = delete;

  const std::string& folder() const { return folder_; }
  static std::string folder_of(const std::string& out) { return out + ".parts"; }

  // On one rank, before any appends: creates the folder with its settings, or checks an existing
  // one. A folder that holds other files, or settings of another command, is refused with one line
  // naming the first setting that differs and the remedy; its work is never discarded. Torn last
  // records are cut off (one line each on stdout). Returns the number of records kept.
  std::int64_t prepare();
  // Every record of every part, in the order of the parts' names and then of the file.
  std::vector<LatentRecord> scan(TornTail torn = TornTail::Keep) const;
  // Appends the record with `values` (samples x sample_floats) to the part of world rank `rank`
  // and flushes it to disk.
  void append(int rank, const LatentRecord& r, const float* values);
  // The values of a scanned record, its CRC checked: a mismatch throws naming the part.
  std::vector<float> read_values(const LatentRecord& r) const;
  // Removes the folder (its settings, parts and nothing else).
  void remove() const;

 private:
  std::string folder_, settings_;
  int fd_ = -1, fd_rank_ = -1;
};

// FNV-1a (64 bits) of `bytes`, continuing from `h`: the records' digests of their files.
std::uint64_t fnv1a64(const std::string& bytes, std::uint64_t h = 0xcbf29ce484222325ull);
// CRC-32 of a whole file (streamed); throws naming the file when it cannot be read.
std::uint32_t file_crc32(const std::string& path);

}  // namespace dit

// Internals of the checkpoint format (see checkpoint.h) shared by save, load and inspect: boxes of
// tensors and tp slices, the validated mapping list of an index dataset, a reader of shard pieces
// whose errors name the file and the tensor, HDF5 writing helpers, and agreed errors.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "io/h5.h"
#include "layers/dit_config.h"
#include "layers/params.h"
#include "parallel/comm.h"

namespace dit::ckpt {

inline constexpr const char* kKinds[4] = {"model", "ema", "exp_avg", "exp_avg_sq"};
inline constexpr const char* kIndexFile = "index.h5";
inline constexpr const char* kCompleteFile = "COMPLETE";

// A box of a tensor: per dim, [start, start + count).
struct Box {
  int rank = 0;
  hsize_t start[kMaxDims] = {0}, count[kMaxDims] = {0};
  std::int64_t numel() const;
  static Box whole(const Shape& s);
};
// a ∩ b; false when empty.
bool intersect(const Box& a, const Box& b, Box& out);
std::string box_str(const Box& b);  // "[0:16, 0:32]"

// One contiguous block of tp rank t's slice of a tensor: where it lies in the global tensor and
// in the local one (equal counts). Replicated and Row give one piece; Column one per group.
struct SlicePiece {
  Box global, local;
};
std::vector<SlicePiece> slice_pieces(const ParamSpec& s, int tp, int t);
// A copy of `space` with the box selected.
h5::Handle select_box(hid_t space, const Box& b, const std::string& where);

// One mapping of an index dataset: a box of the global tensor taken from a box of a source dataset
// of the same counts. file "." is the index file itself.
struct Mapping {
  Box global, source;
  std::string file, dataset;
};
// The mappings of `dataset` in the index, checked before anything is read: shape equal to
// `shape`, float data, boxes inside it, disjoint and covering it, source files plain names in the
// folder. A non-virtual dataset maps to itself. Throws naming the index and the dataset.
std::vector<Mapping> read_mappings(const h5::File& index, const std::string& dataset,
                                   const Shape& shape);

// Reads pieces of shard datasets, opening each file once; errors name the file and the tensor.
class ShardReader {
 public:
  ShardReader(std::string dir, const h5::File& index) : dir_(std::move(dir)), index_(&index) {}
  // Opens the source of `m` and checks that its dataset holds floats and contains m.source.
  void check(const Mapping& m, const std::string& tensor);
  // Reads the part `g` (global coords, inside m.global) into `dest`, a row-major tensor of shape
  // `dest_shape`, at box `dest_box` (same counts as g).
  void read(const Mapping& m, const Box& g, float* dest, const Shape& dest_shape,
            const Box& dest_box, const std::string& tensor);
  // Reads a whole source dataset in bounded slabs (checksums); returns the non-finite count.
  std::int64_t verify(const std::string& file, const std::string& dataset,
                      const std::string& tensor);
  std::string path_of(const std::string& file) const;

 private:
  hid_t file(const std::string& name, const std::string& tensor);
  h5::Handle dataset(const std::string& file, const std::string& name, const std::string& tensor);
  std::string dir_;
  const h5::File* index_;
  std::map<std::string, h5::Handle> files_;
};

// --- writing ---------------------------------------------------------------------------------
// Creates a file in the HDF5 1.10 format (checksummed metadata); throws naming the path.
h5::Handle create_file(const std::string& path);
h5::Handle create_group(hid_t parent, const std::string& name, const std::string& where);
void write_attr_ints(hid_t obj, const std::string& name, const std::vector<std::int64_t>& v,
                     bool scalar, const std::string& where);
void write_attr_u64(hid_t obj, const std::string& name, std::uint64_t v, const std::string& where);
void write_attr_double(hid_t obj, const std::string& name, double v, const std::string& where);
void write_attr_string(hid_t obj, const std::string& name, const std::string& v,
                       const std::string& where);
// A float32 dataset, chunked (at most ~1M elements a chunk) with the Fletcher32 filter.
void write_tensor(hid_t group, const std::string& name, const Shape& shape, const float* data,
                  const std::string& where);
void write_config(hid_t file, const DiTConfig& cfg, const std::string& where);

// --- reading attributes (checked: class and element count, so a hostile file cannot overrun) -----
std::vector<std::int64_t> read_attr_ints(const h5::File& f, const std::string& object,
                                         const std::string& name, std::size_t n);
std::int64_t read_attr_int(const h5::File& f, const std::string& object, const std::string& name);
std::uint64_t read_attr_u64(const h5::File& f, const std::string& object, const std::string& name);
double read_attr_double(const h5::File& f, const std::string& object, const std::string& name);

DiTConfig read_config(const h5::File& f);
// "depth 4 vs 6, hidden_size 64 vs 96" (a vs b); "" when equal.
std::string config_differences(const DiTConfig& a, const DiTConfig& b);

// The innermost messages of HDF5's error stack, e.g. "data error detected by Fletcher32 checksum".
std::string h5_error_text();
// Flushes a file or folder to disk (best effort for folders).
void fsync_path(const std::string& path);

}  // namespace dit::ckpt

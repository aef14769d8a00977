// Internals of the checkpoint format (see checkpoint.h) shared by save, load and inspect: boxes of
// tensors and tp slices, the validated mapping list of an index dataset, a reader of shard pieces
// whose errors name the file and the tensor, the model config's attributes, and agreed errors.
// General HDF5 reading and writing helpers are in io/h5.h.
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



}  // namespace dit::ckpt

// Small RAII helpers over the HDF5 C API, for every HDF5 file dit_mp reads or writes: open files
// and read datasets and attributes with errors that name the file, the object and what was expected
// (files are untrusted input: shapes and sizes are checked before anything is allocated from them);
// write groups, attributes and checksummed tensors; build a whole file in memory.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace dit::h5 {

// Owns one hid_t and closes it with the matching H5*close.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer close) : id_(id), close_(close) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      close_ = o.close_;
      o.id_ = -1;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  explicit operator bool() const { return id_ >= 0; }
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = -1;
  }
  // Closes now and returns the close call's result (a file's close flushes: it can fail).
  herr_t close() {
    const herr_t rc = id_ >= 0 && close_ ? close_(id_) : 0;
    id_ = -1;
    return rc;
  }

 private:
  hid_t id_ = -1;
  Closer close_ = nullptr;
};

// A dataset read whole into doubles (or int64 for integer data), with its shape.
struct Array {
  Shape shape;
  std::vector<double> values;
};

class File {
 public:
  // Opens for reading; throws "<path>: cannot open as HDF5 (...)" when missing or not HDF5.
  static File open_read(const std::string& path);
  const std::string& path() const { return path_; }
  hid_t id() const { return file_.get(); }

  bool exists(const std::string& object) const;  // a link path like "/forward/out"
  // Names of the members of a group, sorted.
  std::vector<std::string> members(const std::string& group) const;
  Array read(const std::string& dataset) const;
  // Reads and checks the shape; the message names the dataset and the expected shape.
  Array read(const std::string& dataset, const Shape& expected) const;
  std::vector<std::int64_t> read_ints(const std::string& dataset) const;
  Shape shape(const std::string& dataset) const;

  bool has_attr(const std::string& object, const std::string& name) const;
  double attr_double(const std::string& object, const std::string& name) const;
  std::int64_t attr_int(const std::string& object, const std::string& name) const;
  bool attr_bool(const std::string& object, const std::string& name) const;
  std::string attr_string(const std::string& object, const std::string& name) const;
  std::vector<std::string> attr_strings(const std::string& object, const std::string& name) const;

 private:
  Handle open_dataset(const std::string& dataset) const;
  Handle open_attr(const std::string& object, const std::string& name) const;
  std::string path_;
  Handle file_;
};

// Turns off HDF5's automatic error printing (errors surface as dit::Error instead).
void silence_errors();

// The innermost messages of HDF5's error stack, e.g. "data error detected by Fletcher32 checksum",
// with the operating system's words when a system call failed ("No space left on device"). Clears
// the stack.
std::string error_text();

// --- reading attributes (checked: class and element count, so a hostile file cannot overrun) -----
std::vector<std::int64_t> read_attr_ints(const File& f, const std::string& object, const std::string& name,
                                         std::size_t n);
std::int64_t read_attr_int(const File& f, const std::string& object, const std::string& name);
std::uint64_t read_attr_u64(const File& f, const std::string& object, const std::string& name);
double read_attr_double(const File& f, const std::string& object, const std::string& name);
std::vector<double> read_attr_doubles(const File& f, const std::string& object, const std::string& name,
                                      std::size_t n);

// --- writing -------------------------------------------------------------------------------------
// `where` (a path) names the file in every error.
enum class AttrShape { Scalar, List };  // one value as a scalar, or a 1-d list
// A creation property list of class `cls` (H5P_FILE_CREATE, H5P_GROUP_CREATE, H5P_DATASET_CREATE)
// that records no times on the objects it creates: HDF5 stamps each object's header with the
// clock otherwise, and the same contents must give the same bytes (a deterministic run writes
// identical files). Every file, group and dataset dit_mp creates takes one.
Handle creation_plist(hid_t cls, const std::string& where);
Handle create_group(hid_t parent, const std::string& name, const std::string& where);
void write_attr_ints(hid_t obj, const std::string& name, const std::vector<std::int64_t>& v, AttrShape shape,
                     const std::string& where);
void write_attr_u64(hid_t obj, const std::string& name, std::uint64_t v, const std::string& where);
void write_attr_double(hid_t obj, const std::string& name, double v, const std::string& where);
void write_attr_string(hid_t obj, const std::string& name, const std::string& v, const std::string& where);
// A float32 dataset, chunked (at most ~1M elements a chunk) with the Fletcher32 filter.
void write_tensor(hid_t group, const std::string& name, const Shape& shape, const float* data,
                  const std::string& where);
// The most bytes write_tensor adds to a file for a tensor of `shape`: its values, a checksum per
// chunk, and its object header, chunk index and link, generously (for DiskFile::create_reserved).
std::uint64_t tensor_file_bound(const Shape& shape);
// A write's working memory in HDF5 beyond the caller's data: a chunk being checksummed.
constexpr std::uint64_t kTensorWriteBuffer = std::uint64_t(4) << 20;

// The HDF5 file format: the library's default, 1.8 or newer (dense attribute storage), or 1.10 only
// (checksummed metadata and chunk indexes).
enum class Format { Default, V18, V110 };
// Sets the format's version bounds on a file-access property list.
void set_format(hid_t fapl, Format format, const std::string& where);
struct FileOptions {
  Format format = Format::Default;
  hsize_t userblock = 0;  // bytes reserved before the HDF5 data (a seal, sealed_h5.h)
};
// A file HDF5 writes on disk (a dataset file, which can be larger than memory) in a temporary place
// that is discarded on failure. close() flushes first and names the cause of a failed flush; a file
// abandoned by an exception or a failed flush is emptied (its disk space freed) before it is
// closed, which gives HDF5's own flush at close room on a full disk.
class DiskFile {
 public:
  // Creates `path` with disk space reserved for `reserve` bytes (posix_fallocate), then lets HDF5
  // open it: HDF5 writes only into space the file already owns, so a full disk fails here, before
  // HDF5 holds the file, and never in a flush (which HDF5 does not recover from). Throws
  // "<path>: cannot write (<errno text>)".
  static DiskFile create_reserved(const std::string& path, std::uint64_t reserve, const FileOptions& options);
  DiskFile(std::string path, Handle file) : path_(std::move(path)), file_(std::move(file)) {}
  DiskFile(DiskFile&&) = default;
  DiskFile& operator=(DiskFile&&) = delete;
  ~DiskFile() { abandon(); }
  hid_t get() const { return file_.get(); }
  // Flushes and closes; throws "<path>: cannot write (<cause>)" after emptying and closing the file.
  void close();

 private:
  void abandon();
  std::string path_;
  Handle file_;
};

// Builds a whole HDF5 file in memory (HDF5's core driver, no backing store) and returns its bytes
// (the driver's own buffer, not a copy), for write_file_atomic. HDF5 does no file I/O, so a full disk
// cannot fail inside the library: HDF5 1.10 does not recover from a failed flush (the file stays
// half-open and the process crashes at exit in H5F__close_cb), and no HDF5 handle outlives a failed
// write. `fill` adds the contents; `where` names the file in errors.
std::string build_in_memory(const std::string& where, const FileOptions& options,
                            const std::function<void(hid_t file)>& fill);

}  // namespace dit::h5

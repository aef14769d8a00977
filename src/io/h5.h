// Small RAII helpers over the HDF5 C API: open files and read datasets and attributes with errors
// that name the file, the object and what was expected. Files are untrusted input: shapes and
// sizes are checked before anything is allocated from them.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
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

}  // namespace dit::h5

// HDF5 files built in memory (see h5.h, build_in_memory): HDF5's core driver without a backing
// store, its buffer kept when the file closes, so that the bytes are those HDF5 would have left on
// disk (an image taken before closing still carries the "open for writing" state of the 1.10
// format's superblock, which readers then refuse).
#include <cstdlib>
#include <cstring>

#include "io/h5.h"

namespace dit::h5 {

namespace {
constexpr std::size_t kCoreIncrement = std::size_t(16) << 20;  // the buffer grows by 16 MiB steps

// The core driver's buffer: allocated through these callbacks, kept when the file closes (freed
// here unless taken).
struct Image {
  void* buf = nullptr;
  std::size_t allocated = 0;
  Image() = default;
  Image(const Image&) = delete;
  Image& operator=(const Image&) = delete;
  ~Image() { std::free(buf); }
};

void* build_malloc(std::size_t n, H5FD_file_image_op_t, void* u) {
  void* p = std::malloc(n);
  if (p) static_cast<Image*>(u)->allocated = n;
  return p;
}
void* build_realloc(void* p, std::size_t n, H5FD_file_image_op_t, void* u) {
  void* q = std::realloc(p, n);
  if (q) static_cast<Image*>(u)->allocated = n;
  return q;
}
herr_t build_free(void* p, H5FD_file_image_op_t op, void* u) {
  if (op == H5FD_FILE_IMAGE_OP_FILE_CLOSE) {
    static_cast<Image*>(u)->buf = p;  // the finished file: kept
    return 0;
  }
  std::free(p);
  return 0;
}

// A read-only look at the kept buffer, in place: never copied, never freed.
void* probe_malloc(std::size_t, H5FD_file_image_op_t, void* u) { return static_cast<Image*>(u)->buf; }
void* probe_memcpy(void* dest, const void* src, std::size_t n, H5FD_file_image_op_t, void*) {
  if (dest != src) std::memcpy(dest, src, n);
  return dest;
}
herr_t probe_free(void*, H5FD_file_image_op_t, void*) { return 0; }

void* same_udata(void* u) { return u; }
herr_t keep_udata(void*) { return 0; }

// The file's length in the closed buffer: the buffer grows in steps, so HDF5 is asked where the
// file ends (its end-of-allocation, after the user block).
std::size_t file_length(Image& im, const std::string& where, hsize_t userblock) {
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  DIT_H5_CHECK(H5Pset_fapl_core(fapl.get(), kCoreIncrement, 0), where, " (in memory)");
  H5FD_file_image_callbacks_t cb = {probe_malloc, probe_memcpy, nullptr, probe_free, same_udata, keep_udata, &im};
  DIT_H5_CHECK(H5Pset_file_image_callbacks(fapl.get(), &cb), where, " (in memory)");
  DIT_H5_CHECK(H5Pset_file_image(fapl.get(), im.buf, im.allocated), where, " (in memory)");
  const std::string label = where + " (built in memory)";
  Handle f(H5Fopen(label.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  DIT_CHECK(bool(f), where, ": cannot reopen the file built in memory (", error_text(), ")");
  const ssize_t n = H5Fget_file_image(f.get(), nullptr, 0);
  DIT_CHECK(n > 0 && std::size_t(n) + userblock <= im.allocated, where, ": the file built in memory has length ", n,
            " in a buffer of ", im.allocated, " bytes");
  return std::size_t(n) + userblock;
}
}  // namespace

std::string build_in_memory(const std::string& where, const MemoryFileOptions& options,
                            const std::function<void(hid_t file)>& fill) {
  silence_errors();
  Image im;
  {
    Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    DIT_H5_CHECK(H5Pset_fapl_core(fapl.get(), kCoreIncrement, 0), where, " (in memory)");
    H5FD_file_image_callbacks_t cb = {build_malloc, nullptr, build_realloc, build_free, same_udata, keep_udata, &im};
    DIT_H5_CHECK(H5Pset_file_image_callbacks(fapl.get(), &cb), where, " (in memory)");
    if (options.format == Format::V110)
      DIT_H5_CHECK(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V110, H5F_LIBVER_V110), where);
    Handle fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
    if (options.userblock > 0) DIT_H5_CHECK(H5Pset_userblock(fcpl.get(), options.userblock), where);
    // Without a backing store the core driver opens no file: the name only labels it.
    const std::string label = where + " (being built in memory)";
    Handle f(H5Fcreate(label.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()), H5Fclose);
    DIT_CHECK(bool(f), where, ": cannot create the file in memory (", error_text(), ")");
    fill(f.get());
    DIT_CHECK(f.close() >= 0, where, ": cannot finish the file in memory (", error_text(), ")");
  }
  DIT_CHECK(im.buf != nullptr, where, ": the file built in memory is empty");
  // The user block (zeros until a seal is written) is part of the buffer, before HDF5's data.
  return std::string(static_cast<const char*>(im.buf), file_length(im, where, options.userblock));
}

}  // namespace dit::h5

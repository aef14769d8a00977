// HDF5 files built in memory (see h5.h, build_in_memory): HDF5's core driver without a backing
// store, its buffer kept when the file closes, so that the bytes are those HDF5 would have left on
// disk (an image taken before closing still carries the "open for writing" state of the 1.10
// format's superblock, which readers then refuse).
#include <cstring>

#include "io/h5.h"

namespace dit::h5 {

namespace {
constexpr std::size_t kCoreIncrement = std::size_t(16) << 20;  // the buffer grows by 16 MiB steps

// The core driver's buffer is this string: it grows through the callbacks below and is kept when
// the file closes, so the finished file is returned without a copy.
struct Image {
  std::string buf;
  bool closed = false;
};

void* build_malloc(std::size_t n, H5FD_file_image_op_t, void* u) {
  auto* im = static_cast<Image*>(u);
  im->buf.assign(n, '\0');
  return im->buf.data();
}
void* build_realloc(void* p, std::size_t n, H5FD_file_image_op_t, void* u) {
  auto* im = static_cast<Image*>(u);
  if (p != nullptr && p != im->buf.data()) return nullptr;  // not ours: refuse
  im->buf.resize(n, '\0');  // keeps the contents, like realloc
  return im->buf.data();
}
herr_t build_free(void* p, H5FD_file_image_op_t op, void* u) {
  auto* im = static_cast<Image*>(u);
  if (p == im->buf.data() && op == H5FD_FILE_IMAGE_OP_FILE_CLOSE) im->closed = true;  // the finished file
  return 0;
}

// A read-only look at the kept buffer, in place: never copied, never freed.
void* probe_malloc(std::size_t, H5FD_file_image_op_t, void* u) { return static_cast<Image*>(u)->buf.data(); }
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
  DIT_H5_CHECK(H5Pset_file_image(fapl.get(), im.buf.data(), im.buf.size()), where, " (in memory)");
  const std::string label = where + " (built in memory)";
  Handle f(H5Fopen(label.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  DIT_CHECK(bool(f), where, ": cannot reopen the file built in memory (", error_text(), ")");
  const ssize_t n = H5Fget_file_image(f.get(), nullptr, 0);
  DIT_CHECK(n > 0 && std::size_t(n) + userblock <= im.buf.size(), where, ": the file built in memory has length ", n,
            " in a buffer of ", im.buf.size(), " bytes");
  return std::size_t(n) + userblock;
}
}  // namespace

std::string build_in_memory(const std::string& where, const FileOptions& options,
                            const std::function<void(hid_t file)>& fill) {
  silence_errors();
  Image im;
  {
    Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    DIT_H5_CHECK(H5Pset_fapl_core(fapl.get(), kCoreIncrement, 0), where, " (in memory)");
    H5FD_file_image_callbacks_t cb = {build_malloc, nullptr, build_realloc, build_free, same_udata, keep_udata, &im};
    DIT_H5_CHECK(H5Pset_file_image_callbacks(fapl.get(), &cb), where, " (in memory)");
    set_format(fapl.get(), options.format, where);
    const Handle fcpl = creation_plist(H5P_FILE_CREATE, where);  // the root group: no times
    if (options.userblock > 0) DIT_H5_CHECK(H5Pset_userblock(fcpl.get(), options.userblock), where);
    // Without a backing store the core driver opens no file: the name only labels it.
    const std::string label = where + " (being built in memory)";
    Handle f(H5Fcreate(label.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()), H5Fclose);
    DIT_CHECK(bool(f), where, ": cannot create the file in memory (", error_text(), ")");
    fill(f.get());
    DIT_CHECK(f.close() >= 0, where, ": cannot finish the file in memory (", error_text(), ")");
  }
  DIT_CHECK(im.closed && !im.buf.empty(), where, ": the file built in memory is missing");
  // The user block (zeros until a seal is written) is part of the buffer, before HDF5's data.
  im.buf.resize(file_length(im, where, options.userblock));
  return std::move(im.buf);
}

}  // namespace dit::h5

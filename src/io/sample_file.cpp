// Raw sample files (see sample_file.h).
#include "io/sample_file.h"

#include <cmath>

#include "io/atomic_file.h"
#include "io/h5.h"

namespace dit {

void write_samples_h5(const std::string& path, const std::vector<float>& samples,
                      const std::vector<int>& labels, int channels, int height, int width) {
  const hsize_t n = labels.size();
  DIT_CHECK(samples.size() == n * channels * height * width, "write_samples_h5: ", samples.size(),
            " values for ", n, " samples of ", channels, "x", height, "x", width);
  check_writable_target(path, "samples");  // before the file is built
  const std::string bytes = h5::build_in_memory(path, {}, [&](hid_t f) {
    const h5::Handle dcpl = h5::creation_plist(H5P_DATASET_CREATE, path);
    const hsize_t dims[4] = {n, hsize_t(channels), hsize_t(height), hsize_t(width)};
    h5::Handle s4(H5Screate_simple(4, dims, nullptr), H5Sclose);
    h5::Handle d(H5Dcreate2(f, "samples", H5T_IEEE_F32LE, s4.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                 H5Dclose);
    DIT_CHECK(bool(d) && H5Dwrite(d.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, samples.data()) >= 0,
              path, ": cannot write samples (", h5::error_text(), ")");
    h5::Handle s1(H5Screate_simple(1, &n, nullptr), H5Sclose);
    h5::Handle l(H5Dcreate2(f, "labels", H5T_STD_I32LE, s1.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                 H5Dclose);
    DIT_CHECK(bool(l) && H5Dwrite(l.get(), H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data()) >= 0,
              path, ": cannot write labels (", h5::error_text(), ")");
  });
  write_file_atomic(path, bytes, "samples");
}

SamplesFile read_samples_h5(const std::string& path) {
  h5::silence_errors();
  const h5::File f = h5::File::open_read(path);
  DIT_CHECK(f.exists("/samples") && f.exists("/labels"), path,
            ": expected datasets 'samples' (N, C, H, W) and 'labels' (N,), as dit_mp sample writes");
  const Shape s = f.shape("/samples"), l = f.shape("/labels");
  DIT_CHECK(s.rank == 4 && s[0] >= 1 && s[1] >= 1 && s[1] <= 16 && s[2] >= 1 && s[2] <= 4096 && s[3] >= 1 &&
                s[3] <= 4096 && s.numel() <= (std::int64_t(1) << 31),
            path, ": samples has shape ", s.str(), ", expected (N, C, H, W) with C <= 16, sides <= 4096");
  DIT_CHECK(l.rank == 1 && l[0] == s[0], path, ": labels has shape ", l.str(), ", expected (", s[0], ",)");
  SamplesFile out;
  out.channels = int(s[1]), out.height = int(s[2]), out.width = int(s[3]);
  const h5::Array values = f.read("/samples", s);
  out.samples.assign(values.values.begin(), values.values.end());
  for (std::size_t i = 0; i < out.samples.size(); ++i)
    DIT_CHECK(std::isfinite(out.samples[i]), path, ": samples holds a non-finite value at flat index ", i);
  for (const std::int64_t v : f.read_ints("/labels")) {
    DIT_CHECK(v >= 0 && v < 1000000, path, ": labels holds ", v, ", expected a class index >= 0");
    out.labels.push_back(int(v));
  }
  return out;
}

}  // namespace dit

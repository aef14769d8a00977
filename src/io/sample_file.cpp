// Raw sample files (see sample_file.h).
#include "io/sample_file.h"

#include <filesystem>

#include "io/h5.h"

namespace dit {

void write_samples_h5(const std::string& path, const std::vector<float>& samples,
                      const std::vector<int>& labels, int channels, int height, int width) {
  h5::silence_errors();
  const hsize_t n = labels.size();
  DIT_CHECK(samples.size() == n * channels * height * width, "write_samples_h5: ", samples.size(),
            " values for ", n, " samples of ", channels, "x", height, "x", width);
  const std::string tmp = path + ".tmp";
  {
    h5::Handle f(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    DIT_CHECK(bool(f), tmp, ": cannot create");
    const hsize_t dims[4] = {n, hsize_t(channels), hsize_t(height), hsize_t(width)};
    h5::Handle s4(H5Screate_simple(4, dims, nullptr), H5Sclose);
    h5::Handle d(H5Dcreate2(f.get(), "samples", H5T_IEEE_F32LE, s4.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                 H5Dclose);
    DIT_CHECK(bool(d) && H5Dwrite(d.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, samples.data()) >= 0,
              tmp, ": cannot write samples");
    h5::Handle s1(H5Screate_simple(1, &n, nullptr), H5Sclose);
    h5::Handle l(H5Dcreate2(f.get(), "labels", H5T_STD_I32LE, s1.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                 H5Dclose);
    DIT_CHECK(bool(l) && H5Dwrite(l.get(), H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data()) >= 0,
              tmp, ": cannot write labels");
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace dit

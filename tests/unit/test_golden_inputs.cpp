// Bad golden files: each defect gives one dit::Error naming the file, the tensor and what was
// expected (never a crash). The files are real HDF5 copies of the tiny golden file, edited with
// the HDF5 C API.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "verify/verify.h"
#include "core/error.h"

namespace dit {

namespace {
namespace fs = std::filesystem;

const std::string kGolden = std::string(DIT_TEST_DATA) + "/dit_tiny_golden.h5";

// A private copy of the golden file, removed at scope exit.
struct GoldenCopy {
  std::string path;
  explicit GoldenCopy(const std::string& name) {
    path = (fs::temp_directory_path() / ("dit_golden_" + name + "_" + std::to_string(::getpid()) + ".h5")).string();
    fs::copy_file(kGolden, path, fs::copy_options::overwrite_existing);
  }
  ~GoldenCopy() { fs::remove(path); }
  hid_t open() const { return H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT); }
};

// Runs verify and returns the error message ("" if it did not throw).
std::string verify_error(const std::string& path, std::vector<std::string> groups = {"forward"}) {
  VerifyOptions o;
  o.golden = path;
  o.groups = std::move(groups);
  try {
    run_verify(o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// An integer attribute of the untouched file's /config (the tests derive shapes from its model).
long long config_int(const char* name) {
  hid_t f = H5Fopen(kGolden.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  long long v = -1;
  hid_t a = H5Aopen_by_name(f, "/config", name, H5P_DEFAULT, H5P_DEFAULT);
  H5Aread(a, H5T_NATIVE_LLONG, &v);
  H5Aclose(a);
  H5Fclose(f);
  return v;
}

// Replaces an attribute (HDF5 1.10 cannot rewrite attributes that newer writers stored in place).
void set_int_attr(hid_t file, const char* obj, const char* name, long long value) {
  ASSERT_GE(H5Adelete_by_name(file, obj, name, H5P_DEFAULT), 0);
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate_by_name(file, obj, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT,
                              H5P_DEFAULT);
  H5Sclose(space);
  ASSERT_GE(a, 0);
  ASSERT_GE(H5Awrite(a, H5T_NATIVE_LLONG, &value), 0);
  H5Aclose(a);
}
}  // namespace

TEST(GoldenInputs, TheUntouchedFilePasses) {
  VerifyOptions o;
  o.golden = kGolden;
  EXPECT_EQ(run_verify(o), 0);
}

TEST(GoldenInputs, MissingFile) {
  const std::string msg = verify_error("/nonexistent/golden.h5");
  EXPECT_NE(msg.find("/nonexistent/golden.h5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
}

TEST(GoldenInputs, NotAnHdf5File) {
  const std::string path = (fs::temp_directory_path() / "dit_not_h5.h5").string();
  { std::ofstream(path) << "hello"; }
  const std::string msg = verify_error(path);
  fs::remove(path);
  EXPECT_NE(msg.find("not an HDF5 file"), std::string::npos) << msg;
}

TEST(GoldenInputs, MissingWeightNamesTheTensor) {
  GoldenCopy g("missing");
  hid_t f = g.open();
  ASSERT_GE(H5Ldelete(f, "/weights/blocks.1.mlp.fc2.weight", H5P_DEFAULT), 0);
  H5Fclose(f);
  const std::string msg = verify_error(g.path);
  EXPECT_NE(msg.find(g.path), std::string::npos) << msg;
  EXPECT_NE(msg.find("/weights/blocks.1.mlp.fc2.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
}

TEST(GoldenInputs, WrongShapeNamesExpectedShape) {
  const long long qkv = 3 * config_int("hidden_size");  // the bias's true length
  ASSERT_GT(qkv, 1);
  GoldenCopy g("shape");
  hid_t f = g.open();
  ASSERT_GE(H5Ldelete(f, "/weights/blocks.0.attn.qkv.bias", H5P_DEFAULT), 0);
  hsize_t dims[1] = {static_cast<hsize_t>(qkv - 1)};
  hid_t space = H5Screate_simple(1, dims, nullptr);
  hid_t d = H5Dcreate2(f, "/weights/blocks.0.attn.qkv.bias", H5T_IEEE_F64LE, space, H5P_DEFAULT,
                       H5P_DEFAULT, H5P_DEFAULT);
  std::vector<double> zeros(qkv - 1, 0.0);
  H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros.data());
  H5Dclose(d);
  H5Sclose(space);
  H5Fclose(f);
  const std::string msg = verify_error(g.path);
  EXPECT_NE(msg.find("blocks.0.attn.qkv.bias"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(" + std::to_string(qkv - 1) + ")"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected (" + std::to_string(qkv) + ")"), std::string::npos) << msg;
}

TEST(GoldenInputs, ConfigThatCannotBeBuilt) {
  {
    const long long hidden = config_int("hidden_size");
    ASSERT_NE(hidden % 5, 0);
    GoldenCopy g("heads");
    hid_t f = g.open();
    set_int_attr(f, "/config", "num_heads", 5);  // hidden_size % 5 != 0
    H5Fclose(f);
    const std::string msg = verify_error(g.path);
    EXPECT_NE(msg.find("hidden_size = " + std::to_string(hidden)), std::string::npos) << msg;
    EXPECT_NE(msg.find("num_heads = 5"), std::string::npos) << msg;
  }
  {
    GoldenCopy g("patch");
    hid_t f = g.open();
    set_int_attr(f, "/config", "patch_size", 3);  // 8 % 3 != 0
    H5Fclose(f);
    const std::string msg = verify_error(g.path);
    EXPECT_NE(msg.find("input_size = 8"), std::string::npos) << msg;
    EXPECT_NE(msg.find("patch_size = 3"), std::string::npos) << msg;
  }
}

TEST(GoldenInputs, LabelOutOfRange) {
  GoldenCopy g("label");
  hid_t f = g.open();
  hid_t d = H5Dopen2(f, "/forward/y", H5P_DEFAULT);
  long long y[3] = {1, 42, 10};
  ASSERT_GE(H5Dwrite(d, H5T_NATIVE_LLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, y), 0);
  H5Dclose(d);
  H5Fclose(f);
  const std::string msg = verify_error(g.path);
  EXPECT_NE(msg.find("label 42"), std::string::npos) << msg;
}

TEST(GoldenInputs, UnknownOrAbsentGroup) {
  EXPECT_NE(verify_error(kGolden, {"bogus"}).find("unknown verify group 'bogus'"), std::string::npos);
  GoldenCopy g("nogroup");
  hid_t f = g.open();
  ASSERT_GE(H5Ldelete(f, "/sample", H5P_DEFAULT), 0);
  H5Fclose(f);
  EXPECT_NE(verify_error(g.path, {"sample"}).find("group /sample is missing"), std::string::npos);
}

}  // namespace dit

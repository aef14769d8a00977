// Every file writer of io/ (PNG, samples, weights, the evaluation classifier, both dataset
// preparations) against a real full disk (a small tmpfs) and a folder where the file should go:
// one line naming the file and the cause in errno's words, the previous file intact, no temporary
// left, and no HDF5 handle open afterwards (one left open crashed the process at exit).
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/wait.h>
#include <zlib.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>

#include "eval/classifier.h"
#include "io/h5.h"
#include "io/png.h"
#include "io/prepare.h"
#include "io/sample_file.h"
#include "io/weights.h"
#include "io_test_util.h"
#include "layers/dit_stage.h"
#include "tiny_model.h"

namespace dit {
namespace {

using namespace io_test;

void write_gz(const std::string& path, std::uint32_t magic, const std::vector<std::uint32_t>& dims,
              const std::vector<std::uint8_t>& data) {
  std::vector<std::uint8_t> bytes;
  auto be32 = [&](std::uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) bytes.push_back(std::uint8_t(v >> s));
  };
  be32(magic);
  for (auto d : dims) be32(d);
  bytes.insert(bytes.end(), data.begin(), data.end());
  gzFile f = gzopen(path.c_str(), "wb1");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
  gzclose(f);
}

void write_npy(const std::string& path, const std::string& descr, const std::string& shape, const void* data,
               std::size_t bytes) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  f.write("\x93NUMPY\x01\x00", 8);
  f.put(char(header.size() & 0xff));
  f.put(char(header.size() >> 8));
  f << header;
  f.write(static_cast<const char*>(data), std::streamsize(bytes));
}

// Inputs of every writer, made once outside the disk under test; each output is 300-600 KB of
// incompressible data, more than the disk holds.
struct Inputs {
  Scratch src{"io_faults_src"};
  std::vector<std::uint8_t> pixels;  // 400 x 400 RGB noise
  std::vector<float> samples;        // 100 x 1 x 32 x 32
  std::vector<int> labels;
  DiTConfig cfg = tiny_dit(4, 4, 4, 10);
  std::map<std::string, std::vector<float>> tensors;
  Inputs() {
    std::uint32_t x = 12345;
    auto next = [&] { return x = x * 1664525u + 1013904223u; };
    pixels.resize(400 * 400 * 3);
    for (auto& p : pixels) p = std::uint8_t(next() >> 24);
    samples.resize(100 * 32 * 32);
    for (auto& v : samples) v = float(next() >> 8) / float(1 << 24) * 2 - 1;
    labels.assign(100, 3);
    for (const ParamSpec& s : DiTStage::declare(cfg, StageLayout::whole(cfg))) {
      std::vector<float> v(std::size_t(s.global.numel()));
      for (auto& w : v) w = float(next() >> 8) / float(1 << 24);
      tensors[s.name] = std::move(v);
    }
    std::vector<std::uint8_t> images(600 * 28 * 28), classes(600, 1);
    for (auto& p : images) p = std::uint8_t(next() >> 24);
    write_gz(src / "train-images-idx3-ubyte.gz", 0x803, {600, 28, 28}, images);
    write_gz(src / "train-labels-idx1-ubyte.gz", 0x801, {600}, classes);
    fs::create_directories(src.path / "f");
    fs::create_directories(src.path / "y");
    for (int i = 0; i < 30; ++i) {
      std::vector<float> f(4 * 32 * 32);
      for (auto& v : f) v = float(next() >> 8) / float(1 << 24);
      const std::int64_t label = i % 10;
      write_npy(src / ("f/" + std::to_string(i) + ".npy"), "<f4", "(1, 4, 32, 32)", f.data(), f.size() * 4);
      write_npy(src / ("y/" + std::to_string(i) + ".npy"), "<i8", "(1,)", &label, 8);
    }
  }
};

struct Writer {
  std::string name, file;
  std::function<void(const std::string& path)> write;
};

std::vector<Writer> writers(const Inputs& in) {
  return {
      {"PNG", "grid.png", [&](const std::string& p) { write_png(p, 400, 400, 3, in.pixels.data()); }},
      {"samples", "samples.h5", [&](const std::string& p) { write_samples_h5(p, in.samples, in.labels, 1, 32, 32); }},
      {"weights", "ema.h5", [&](const std::string& p) { save_weights(p, in.cfg, in.tensors, 1000); }},
      {"classifier", "classifier.h5", [&](const std::string& p) { eval::Classifier(1, 32, 32, 10, 7).save(p, "noise"); }},
      {"dataset", "fm.h5",
       [&](const std::string& p) { prepare_fashion_mnist(in.src.path.string(), p, "train", Overwrite::Yes); }},
      {"dataset", "latents.h5",
       [&](const std::string& p) { prepare_latents(in.src / "f", in.src / "y", p, 0.5, Overwrite::Yes); }},
  };
}

// Each writer replaces its previous file on a disk with `leave` bytes free: it must fail with one
// line naming the file and "No space left on device", keep the previous file, leave nothing behind
// and no HDF5 object open.
void full_disk_case(std::size_t leave) {
  const Inputs in;
  Scratch root("io_faults_disk");
  const Tmpfs disk(root / "disk", "256k");
  if (!disk.mounted) GTEST_SKIP() << disk.why;
  const std::vector<Writer> all = writers(in);
  for (const Writer& w : all) write_plain(disk.dir + "/" + w.file, "previous " + w.file);
  disk.fill(leave);
  const std::vector<std::string> before = listing(disk.dir);
  for (const Writer& w : all) {
    SCOPED_TRACE(w.name + " " + w.file + ", " + std::to_string(leave) + " bytes free");
    const std::string path = disk.dir + "/" + w.file;
    const std::string msg = error_of([&] { w.write(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("No space left on device"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_EQ(read_all(path), "previous " + w.file);
    EXPECT_EQ(listing(disk.dir), before);
    EXPECT_EQ(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL), 0) << "an HDF5 object outlived the failed write";
  }
}

TEST(WriteFaults, FullDiskEveryWriterFailsInOneLineAndKeepsThePreviousFile) { full_disk_case(0); }
TEST(WriteFaults, DiskFillingUpMidwayEveryWriterFailsInOneLineAndKeepsThePreviousFile) {
  full_disk_case(96 << 10);
}

// HDF5 shuts down at exit over every file it still holds: a file left half-open by a failed write
// crashed the process there (SIGSEGV in H5F__close_cb), after the right message. For each writer a
// child process writes to a fresh disk that fills up midway, then exits normally.
TEST(WriteFaults, FailedWritesLeaveNothingForHdf5ToCrashOnAtExit) {
  const Inputs in;
  Scratch root("io_faults_exit");
  for (const Writer& w : writers(in)) {
    SCOPED_TRACE(w.name + " " + w.file);
    const Tmpfs disk(root / ("disk_" + w.file), "256k");
    if (!disk.mounted) GTEST_SKIP() << disk.why;
    disk.fill(96 << 10);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) std::exit(error_of([&] { w.write(disk.dir + "/" + w.file); }).empty() ? 3 : 0);  // runs HDF5's shutdown
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status)) << "the process died of signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0) << "3: the write did not fail";
  }
}

// A checkpoint shard is written into disk space reserved first (h5::DiskFile), sized by
// h5::tensor_file_bound: the bound must cover what HDF5 really puts in the file for tensors of
// one chunk, of many chunks, of a row larger than a chunk, and for groups of hundreds of links
// (dense link storage), or a nearly full disk would meet HDF5 mid-write after all.
TEST(WriteFaults, ReservedTensorFileHoldsWhatHdf5Writes) {
  Scratch root("tensor_bound");
  const std::vector<std::pair<Shape, int>> cases = {  // shape, how many of it in each group
      {Shape{3}, 300}, {Shape{384}, 100}, {Shape{1152, 384}, 3}, {Shape{2100, 1024}, 1}, {Shape{1, 1500000}, 1},
      {Shape{4, 5, 6, 7}, 20}};
  std::uint64_t bound = 64 << 10, values = 0;
  for (const auto& [shape, n] : cases) {
    bound += 4 * std::uint64_t(n) * h5::tensor_file_bound(shape);
    values += 4 * std::uint64_t(n) * 4 * std::uint64_t(shape.numel());
  }
  const std::string path = root / "shard.h5";
  {
    h5::DiskFile f = h5::DiskFile::create_reserved(path, bound, {h5::Format::V110});
    std::vector<float> data(1500000 * 2);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = float(i % 977) * 0.5f;
    for (const char* group : {"model", "ema", "exp_avg", "exp_avg_sq"}) {
      h5::Handle g = h5::create_group(f.get(), group, path);
      int k = 0;
      for (const auto& [shape, n] : cases)
        for (int i = 0; i < n; ++i) h5::write_tensor(g.get(), "t" + std::to_string(k++), shape, data.data(), path);
    }
    f.close();
  }
  const std::uint64_t size = fs::file_size(path);
  EXPECT_GE(size, values) << "the file lost values";
  EXPECT_LE(size, bound) << "HDF5 wrote past the space reserved for it";
  EXPECT_LE(bound, size + size / 8 + (1 << 20)) << "a reserve far above the file: a full disk refused needlessly";
}

// A folder where the file should go is refused before anything is written: no "<folder>.tmp".
TEST(WriteFaults, FolderTargetRefusedBeforeWriting) {
  const Inputs in;
  Scratch root("io_faults_folder");
  for (const Writer& w : writers(in)) {
    SCOPED_TRACE(w.name + " " + w.file);
    const std::string path = root / w.file;
    fs::create_directory(path);
    const std::string msg = error_of([&] { w.write(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("Is a directory"), std::string::npos) << msg;
    EXPECT_EQ(listing(root.path), std::vector<std::string>{w.file});
    EXPECT_TRUE(fs::is_empty(path));
    fs::remove(path);
  }
}

// Non-finite latents are refused at preparation, naming the file and the index.
TEST(WriteFaults, PrepareLatentsRefusesNonFiniteFeatures) {
  Scratch dir("io_faults_nan");
  fs::create_directories(dir.path / "f");
  fs::create_directories(dir.path / "y");
  for (int i = 0; i < 3; ++i) {
    std::vector<float> f(4 * 2 * 3, 0.5f);
    if (i == 1) f[1 * 6 + 1 * 3 + 2] = std::numeric_limits<float>::quiet_NaN();  // index (0, 1, 1, 2)
    if (i == 2) f[0] = -std::numeric_limits<float>::infinity();
    const std::int64_t label = i;
    write_npy(dir / ("f/" + std::to_string(i) + ".npy"), "<f4", "(1, 4, 2, 3)", f.data(), f.size() * 4);
    write_npy(dir / ("y/" + std::to_string(i) + ".npy"), "<i8", "(1,)", &label, 8);
  }
  const std::string out = dir / "lat.h5";
  std::string msg = error_of([&] { prepare_latents(dir / "f", dir / "y", out, 0.5); });
  EXPECT_NE(msg.find(dir / "f/1.npy"), std::string::npos) << msg;
  EXPECT_NE(msg.find("NaN at index (0, 1, 1, 2)"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(out));
  std::vector<float> ok(24, 0.5f);
  write_npy(dir / "f/1.npy", "<f4", "(1, 4, 2, 3)", ok.data(), 96);
  msg = error_of([&] { prepare_latents(dir / "f", dir / "y", out, 0.5); });
  EXPECT_NE(msg.find(dir / "f/2.npy"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Inf at index (0, 0, 0, 0)"), std::string::npos) << msg;
  EXPECT_EQ(listing(dir.path), (std::vector<std::string>{"f", "y"}));
}

}  // namespace
}  // namespace dit

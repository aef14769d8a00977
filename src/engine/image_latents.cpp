// Pictures into VAE latents over the ranks (see image_latents.h): the plan every rank makes of the
// command, the batches each rank encodes into its part, the progress line, and rank 0's assembly.
#include "engine/image_latents.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>

#include "core/arena.h"
#include "core/error.h"
#include "core/philox.h"
#include "core/resources.h"
#include "engine/rank_backend.h"
#include "io/atomic_file.h"
#include "io/dataset_writer.h"
#include "io/image_prep.h"
#include "io/latent_work.h"
#include "io/vae_weights.h"
#include "layers/vae.h"
#include "parallel/agree.h"
#include "parallel/device_placement.h"
#include "parallel/world.h"

namespace dit {

namespace {

namespace fs = std::filesystem;

const char* flips_name(Flips f) { return f == Flips::Both ? "both" : "none"; }

// What every rank knows of the command before any work.
struct Plan {
  ImageLatentsOptions o;
  ImageFolder folder;
  VaeFile vae;
  std::string compute;  // the VAE's backend and dtype, "cpu" or "cuda:bf16"
  int copies = 1, side = 0, channels = 0;  // latents per picture, their side and channels
  std::int64_t batches = 0;
  int encode_at_once = 1;  // pictures the VAE encodes at once: a batch's, or fewer where memory is short
  std::string memory_where;  // the memory it was sized against (core/resources.h HostBudget::where)
  std::string dir;       // the folder of pictures by its resolved path (no link, no working directory)
  std::string settings;  // rank 0: the work folder's settings
  std::int64_t first(std::int64_t b) const { return b * o.batch; }
  std::int64_t end(std::int64_t b) const { return std::min<std::int64_t>((b + 1) * o.batch, files()); }
  std::int64_t files() const { return std::int64_t(folder.files.size()); }
  std::int64_t sample_floats() const { return std::int64_t(channels) * side * side; }
  std::string latent_text() const {
    return o.latent == LatentDraw::Mean ? "mean" : "sample, seed " + std::to_string(o.seed);
  }
};

std::string hex(std::uint64_t v, int digits) {
  char s[20];
  std::snprintf(s, sizeof s, "%0*llx", digits, static_cast<unsigned long long>(v));
  return s;
}

// The pictures (copies included) the VAE encodes at once on the CPU: a batch's, halved until the
// encode (layers/vae.h vae_encode_bytes) and its host buffers fit this rank's share of the tightest
// memory limit (core/resources.h host_budget); throws with the numbers when one picture does not.
// Each picture's latent is the same at any count (every op works per image).
int encode_at_once(Plan& p, int ranks_here) {
  if (p.compute.rfind("cpu", 0) != 0) return p.o.batch * p.copies;  // the GPU's memory is its own
  const HostBudget budget = host_budget(ranks_here);
  p.memory_where = budget.where;
  const VaeConfig& c = p.vae.config;
  const std::int64_t s = p.o.size;
  const std::size_t colon = p.compute.find(':');  // "cpu" is fp32, "cpu:bf16" names its dtype
  const DType dt = colon == std::string::npos ? DType::F32 : parse_dtype(p.compute.substr(colon + 1));
  for (int n = p.o.batch * p.copies;; n = (n + 1) / 2) {
    // The encode; the batch's decoded crops, fp32 pictures, moments and latents on the host.
    const double host = 4.0 * double(p.o.batch) * double(p.copies) *
                        (3.0 * double(s * s) * 1.25 + 3.0 * double(p.channels) * double(p.side * p.side));
    const double need = double(vae_encode_bytes(c, dt, n, s, s, BackendKind::Cpu)) + host;
    if (need <= budget.bytes) return n;
    if (n == 1)
      DIT_FAIL("encoding one picture of ", s, " x ", s, " with the VAE ", p.o.vae, " needs ", format_bytes(need),
               " (its parameters, activations and scratch, planned, and a batch's pictures at --batch ", p.o.batch,
               "), more than ", budget.where, "; give it a machine or job with more memory, fewer ranks on one ",
               "machine, or a smaller --batch or --size");
  }
}

Plan make_plan(const ImageLatentsOptions& o, int ranks_here) {
  Plan p;
  p.o = o;
  DIT_CHECK(o.size >= 1 && o.batch >= 1, "image latents: size ", o.size, " and batch ", o.batch, " must be positive");
  p.folder = list_image_folder(o.dir);
  p.vae = open_vae(o.vae, o.vae_config);
  // What is recorded (the work folder's settings, the dataset's attributes) names the folder, the
  // VAE and its config by their resolved paths: reached relatively, from another working directory
  // or through a link, they are the same preparation and the same dataset (the bytes: crc32 below).
  p.dir = fs::weakly_canonical(o.dir).string();
  p.vae.path = fs::weakly_canonical(o.vae).string();
  if (!p.vae.config_path.empty()) p.vae.config_path = fs::weakly_canonical(p.vae.config_path).string();
  const VaeConfig& c = p.vae.config;
  DIT_CHECK(c.in_channels == 3, "the VAE ", o.vae, ": it encodes ", c.in_channels, "-channel images; pictures are RGB");
  DIT_CHECK(o.size % c.downsampling() == 0, "image size ", o.size, " is not a multiple of the VAE's downsampling factor ",
            c.downsampling(), "; try ", std::max(1, o.size / c.downsampling()) * c.downsampling());
  // diffusers' force_upcast: the VAE runs in fp32 whatever precision is asked for.
  p.compute = backend_name(o.backend, p.vae.force_upcast ? "fp32" : o.precision);
  std::string why;
  DIT_CHECK(backend_available(p.compute, &why), "backend ", p.compute, ": ", why);
  p.copies = o.flips == Flips::Both ? 2 : 1;
  p.side = o.size / c.downsampling();
  p.channels = c.latent_channels;
  p.batches = (p.files() + o.batch - 1) / o.batch;
  p.encode_at_once = encode_at_once(p, ranks_here);  // before the lock and the work folder: refused, nothing is left
  if (world_rank() == 0) {
    // What the records' values depend on, one "key value" line each (io/latent_work.h).
    const std::string vae_id = p.vae.path + " (" + std::to_string(fs::file_size(o.vae)) + " bytes, crc32 " +
                               hex(file_crc32(o.vae), 8) + ")";
    p.settings = "work dit_mp prepare-data images --vae, version 1\nfolder " + p.dir + "\nsize " +
                 std::to_string(o.size) + "\nflips " +
                 flips_name(o.flips) + "\nlatent " + p.latent_text() + "\nbatch " + std::to_string(o.batch) +
                 "\nvae " + vae_id + "\nvae_architecture " + p.vae.describe() + "\ncompute " + p.compute + "\n";
  }
  return p;
}

// The digest of batch b's files: each one's place (class/name), size, modification time and label.
std::uint64_t batch_digest(const Plan& p, std::int64_t b) {
  std::uint64_t h = fnv1a64("batch " + std::to_string(b));
  for (std::int64_t i = p.first(b); i < p.end(b); ++i) {
    const std::string& file = p.folder.files[std::size_t(i)];
    const int label = p.folder.labels[std::size_t(i)];
    struct stat st{};
    std::string id = p.folder.classes[std::size_t(label)] + "/" + fs::path(file).filename().string() + " ";
    if (::stat(file.c_str(), &st) == 0)
      id += std::to_string(st.st_size) + " " + std::to_string(st.st_mtim.tv_sec) + "." +
            std::to_string(st.st_mtim.tv_nsec);
    else
      id += "unreadable";
    h = fnv1a64(id + " " + std::to_string(label) + "\n", h);
  }
  return h;
}

// A record serves batch b when it was made of the same files, in the same shape.
bool serves(const Plan& p, const LatentRecord& r, std::uint64_t digest) {
  std::int64_t ok = 0;
  for (const std::string& q : r.problems) ok += q.empty();
  return r.files_digest == digest && std::int64_t(r.problems.size()) == p.end(r.batch) - p.first(r.batch) &&
         r.sample_floats == p.sample_floats() && r.samples == ok * p.copies;
}

// The record serving each batch (nullptr: not done), from a scan of the work folder.
std::vector<const LatentRecord*> finished(const Plan& p, const std::vector<LatentRecord>& records) {
  std::vector<const LatentRecord*> by_batch(std::size_t(p.batches), nullptr);
  std::vector<std::uint64_t> digests(std::size_t(p.batches), 0);
  std::vector<bool> known(std::size_t(p.batches), false);
  for (const LatentRecord& r : records) {
    if (r.batch < 0 || r.batch >= p.batches || by_batch[std::size_t(r.batch)]) continue;
    if (!known[std::size_t(r.batch)]) digests[std::size_t(r.batch)] = batch_digest(p, r.batch);
    known[std::size_t(r.batch)] = true;
    if (serves(p, r, digests[std::size_t(r.batch)])) by_batch[std::size_t(r.batch)] = &r;
  }
  return by_batch;
}

std::string bad_file_line(const Plan& p, const std::string& file, const std::string& problem) {
  return file + ": " + problem + p.o.bad_file_hint;
}

// Encodes one batch at a time on this rank's backend.
class BatchEncoder {
 public:
  BatchEncoder(const Plan& p, Backend& be) : p_(p), be_(be), vae_(be, p.vae.config, p.vae.source()), arena_(be) {}

  // The record of batch b and its values (samples x sample floats).
  LatentRecord encode(std::int64_t b, std::vector<float>& values) {
    const std::int64_t first = p_.first(b), count = p_.end(b) - first;
    LatentRecord rec;
    rec.batch = b;
    rec.files_digest = batch_digest(p_, b);
    rec.sample_floats = p_.sample_floats();
    rec.problems.assign(std::size_t(count), "");
    std::vector<RgbImage> crops(static_cast<std::size_t>(count));
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(count));
    // Decoding and cropping, each picture on its own (any thread count gives the same pixels).
#pragma omp parallel for schedule(dynamic)
    for (std::int64_t i = 0; i < count; ++i) {
      try {
        DecodedImage d = decode_image_file(p_.folder.files[std::size_t(first + i)]);
        if (d.ok()) crops[std::size_t(i)] = center_crop_arr(d.image, p_.o.size);
        else rec.problems[std::size_t(i)] = d.problem;
      } catch (...) {
        errors[std::size_t(i)] = std::current_exception();
      }
    }
    for (std::int64_t i = 0; i < count; ++i) {
      if (errors[std::size_t(i)]) std::rethrow_exception(errors[std::size_t(i)]);
      if (!rec.problems[std::size_t(i)].empty() && p_.o.bad_files == BadFiles::Fail)
        DIT_FAIL(bad_file_line(p_, p_.folder.files[std::size_t(first + i)], rec.problems[std::size_t(i)]));
    }
    std::vector<std::int64_t> sources;  // the file index of each latent
    const std::int64_t pixels = 3 * std::int64_t(p_.o.size) * p_.o.size;
    std::vector<float> images;
    for (std::int64_t i = 0; i < count; ++i) {
      if (!rec.problems[std::size_t(i)].empty()) continue;
      for (int flip = 0; flip < p_.copies; ++flip) {
        images.resize(images.size() + std::size_t(pixels));
        to_unit_chw(crops[std::size_t(i)], flip ? Mirror::Yes : Mirror::No, images.data() + images.size() - pixels);
        sources.push_back(first + i);
      }
    }
    rec.samples = std::int64_t(sources.size());
    values.assign(std::size_t(rec.samples * rec.sample_floats), 0.f);
    if (rec.samples > 0) latents(images, sources, values);
    return rec;
  }

 private:
  // The encoder's moments of `images` (host fp32), then the stored latent of each.
  void latents(const std::vector<float>& images, const std::vector<std::int64_t>& sources, std::vector<float>& out) {
    const std::int64_t n = std::int64_t(sources.size()), s = p_.o.size, l = p_.channels, hw = std::int64_t(p_.side) * p_.side;
    const DType dt = be_.compute_dtype();
    std::vector<float> moments(std::size_t(n * 2 * l * hw));
    for (std::int64_t first = 0; first < n; first += p_.encode_at_once) {  // as many at once as memory allows
      const std::int64_t k = std::min<std::int64_t>(p_.encode_at_once, n - first);
      arena_.reset();
      Tensor x = arena_.tensor(Shape{k, 3, s, s}, dt);
      be_.copy(x, Tensor{const_cast<float*>(images.data()) + first * 3 * s * s, DType::F32, x.shape, Device::Host});
      Tensor m = arena_.tensor(Shape{k, 2 * l, p_.side, p_.side}, dt);
      vae_.encode(x, m);
      be_.copy(Tensor{moments.data() + first * 2 * l * hw, DType::F32, m.shape, Device::Host}, m);
      be_.synchronize();
    }
    for (std::int64_t k = 0; k < n; ++k) {
      const float* mean = &moments[std::size_t(k * 2 * l * hw)];
      const float* logvar = mean + l * hw;
      float* z = &out[std::size_t(k * l * hw)];
      const bool mirrored = p_.copies == 2 && k % 2 == 1;
      Philox noise(p_.o.seed, RngPurpose::LatentSample, mirrored ? 1 : 0, std::uint64_t(sources[std::size_t(k)]));
      for (std::int64_t j = 0; j < l * hw; ++j) {
        z[j] = mean[j];
        if (p_.o.latent == LatentDraw::Sample)
          z[j] += std::exp(0.5f * std::clamp(logvar[j], -30.f, 20.f)) * noise.normal();
        DIT_CHECK(std::isfinite(z[j]), p_.folder.files[std::size_t(sources[std::size_t(k)])],
                  ": the VAE's latent of this picture is not finite (", z[j], " at value ", j, ")");
      }
    }
  }

  const Plan& p_;
  Backend& be_;
  Vae vae_;
  Arena arena_;
};

// Rank 0's progress line: every 5 seconds and at the end.
class LatentProgress {
 public:
  LatentProgress(std::int64_t total, std::int64_t done_before, bool enabled)
      : total_(total), before_(done_before), enabled_(enabled), start_(Clock::now()), last_(start_) {}
  void update(std::int64_t done) {
    const auto now = Clock::now();
    if (!enabled_ || (done < total_ && now - last_ < std::chrono::seconds(5))) return;
    last_ = now;
    const double s = std::chrono::duration<double>(now - start_).count();
    const double rate = s > 0 ? double(done - before_) / s : 0.0;
    std::printf("prepare-data: %lld/%lld images (%.1f%%), %.1f images/s", static_cast<long long>(done),
                static_cast<long long>(total_), 100.0 * double(done) / double(total_), rate);
    if (done < total_ && rate > 0) {
      const long long eta = std::llround(double(total_ - done) / rate);
      std::printf(", ETA %lldh %02lldm %02llds", eta / 3600, eta / 60 % 60, eta % 60);
    }
    std::printf("\n");
    std::fflush(stdout);
  }

 private:
  using Clock = std::chrono::steady_clock;
  std::int64_t total_, before_;
  bool enabled_;
  Clock::time_point start_, last_;
};

// This rank's share of the batches not yet done: rounds in which rank r takes todo[round * world + r].
void encode_batches(const Plan& p, const std::vector<std::int64_t>& todo, std::int64_t done_before,
                    LatentWork& work, RankSetup& rank) {
  Comm& world = *rank.ctx.world;
  std::unique_ptr<BatchEncoder> encoder;
  agree(world, [&] { encoder = std::make_unique<BatchEncoder>(p, *rank.backend); });
  const char* kill = std::getenv(kKillAfterEnv);
  const std::int64_t kill_after = kill ? std::atoll(kill) : 0;
  std::int64_t mine = 0;
  LatentProgress progress(p.files(), done_before, world.rank() == 0);
  std::int64_t done = done_before;
  const std::int64_t rounds = (std::int64_t(todo.size()) + world.size() - 1) / world.size();
  std::vector<float> values;
  for (std::int64_t r = 0; r < rounds; ++r) {
    const std::int64_t at = r * world.size() + world.rank();
    double files = 0;
    agree(world, [&] {
      if (at >= std::int64_t(todo.size())) return;
      const LatentRecord rec = encoder->encode(todo[std::size_t(at)], values);
      work.append(rank.ctx.world_rank, rec, values.data());
      files = double(rec.problems.size());
      mine += rec.samples;
    });
    if (kill_after > 0 && mine >= kill_after) std::raise(SIGKILL);  // the resume test's kill -9
    world.all_reduce_sum(&files, 1);
    done += std::int64_t(files);
    progress.update(done);
  }
}

// Rank 0: the dataset from the records, batch by batch, renamed into place; then the work folder goes.
PrepareResult assemble(const Plan& p, LatentWork& work) {
  const std::vector<LatentRecord> records = work.scan();
  const std::vector<const LatentRecord*> by_batch = finished(p, records);
  std::int64_t n = 0;
  std::vector<std::int32_t> labels;
  std::vector<std::string> skipped;
  for (std::int64_t b = 0; b < p.batches; ++b) {
    const LatentRecord* r = by_batch[std::size_t(b)];
    DIT_CHECK(r != nullptr, work.folder(), ": no record of files ", p.first(b), " to ", p.end(b) - 1,
              " matches them (did they change while the preparation ran?); rerun the command");
    for (std::size_t i = 0; i < r->problems.size(); ++i) {
      const std::string& file = p.folder.files[std::size_t(p.first(b)) + i];
      if (!r->problems[i].empty()) {
        DIT_CHECK(p.o.bad_files == BadFiles::Skip, bad_file_line(p, file, r->problems[i]));
        skipped.push_back(file + ": " + r->problems[i]);
        continue;
      }
      for (int c = 0; c < p.copies; ++c) labels.push_back(p.folder.labels[std::size_t(p.first(b)) + i]);
    }
    n += r->samples;
  }
  DIT_CHECK(n > 0, p.o.dir, ": none of its ", p.files(), " files could be read");
  const std::string vae_file = fs::path(p.vae.path).filename().string();
  const std::string preprocessing = "ADM center_crop_arr to " + std::to_string(p.o.size) + "x" +
                                    std::to_string(p.o.size) + ", x/127.5-1; flips " + flips_name(p.o.flips) +
                                    (p.copies == 2 ? " (each picture, then its mirror image)" : "");
  DatasetLayout layout{n, p.channels, p.side, p.side, true};
  layout.text_bytes = p.dir.size() + 2 * p.vae.describe().size() + preprocessing.size() + 256;
  for (const std::string& c : p.folder.classes) layout.text_bytes += c.size() + 32;
  write_atomically(p.o.out, "dataset", [&](const std::string& tmp) {
    DatasetWriter w(tmp, layout);
    std::int64_t at = 0;
    for (const LatentRecord* r : by_batch) {
      const std::vector<float> v = work.read_values(*r);
      w.write(at, r->samples, v.data());
      at += r->samples;
    }
    const double scale = p.vae.scaling_factor;
    const std::int64_t size = p.o.size, skips = std::int64_t(skipped.size());
    write_dataset_attr(w.file(), "latent_scale", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &scale, 0, tmp);
    if (p.vae.shift_factor != 0.0) {  // (SD3/Flux-style VAEs; training serves (x - shift) * scale)
      const double shift = p.vae.shift_factor;
      write_dataset_attr(w.file(), "latent_shift", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &shift, 0, tmp);
    }
    if (!p.vae.latents_mean.empty()) {  // per channel: (x - mean_c) * scale / std_c
      const hsize_t c = p.vae.latents_mean.size();
      write_dataset_attr(w.file(), "latent_mean", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, p.vae.latents_mean.data(), c, tmp);
      write_dataset_attr(w.file(), "latent_std", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, p.vae.latents_std.data(), c, tmp);
    }
    write_dataset_attr_strings(w.file(), "class_names", p.folder.classes, h5::AttrShape::List, tmp);
    write_dataset_attr_strings(w.file(), "vae", {p.vae.describe()}, h5::AttrShape::Scalar, tmp);
    if (p.vae.config_path.empty())  // the groups and the scale were not read but assumed
      write_dataset_attr_strings(w.file(), "vae_assumed", {kVaeAssumed}, h5::AttrShape::Scalar, tmp);
    write_dataset_attr_strings(w.file(), "vae_file", {vae_file}, h5::AttrShape::Scalar, tmp);
    write_dataset_attr_strings(w.file(), "preprocessing", {preprocessing}, h5::AttrShape::Scalar, tmp);
    write_dataset_attr_strings(w.file(), "latent", {p.latent_text()}, h5::AttrShape::Scalar, tmp);
    write_dataset_attr(w.file(), "image_size", H5T_STD_I64LE, H5T_NATIVE_INT64, &size, 0, tmp);
    write_dataset_attr(w.file(), "skipped_files", H5T_STD_I64LE, H5T_NATIVE_INT64, &skips, 0, tmp);
    w.finish(labels, int(p.folder.classes.size()), "image folder " + p.dir + " through the VAE " + vae_file);
  });
  work.remove();
  for (const std::string& s : skipped) std::printf("skipped %s\n", s.c_str());
  if (!skipped.empty())
    std::printf("skipped %zu of %lld files that do not decode\n", skipped.size(), static_cast<long long>(p.files()));
  return PrepareResult{p.o.out, n, int(p.folder.classes.size())};
}

}  // namespace

PrepareResult prepare_image_latents(const ImageLatentsOptions& options) {
  Plan p;
  // Collective (every rank is here); one rank, MPI started or not, is alone on its machine.
  const int ranks_here = world_size() > 1 ? place_rank_on_gpu().local_size : 1;
  collective_check([&] { p = make_plan(options, ranks_here); });
  LatentWork work(options.out, p.settings);
  std::int64_t kept = 0;
  collective_check([&] {
    if (world_rank() == 0) kept = work.prepare();
  });
  // Every rank reads what is done (nothing is appended until all have).
  std::vector<std::int64_t> todo;
  std::int64_t done_before = 0;
  collective_check([&] {
    const std::vector<LatentRecord> records = work.scan();
    const std::vector<const LatentRecord*> by_batch = finished(p, records);
    for (std::int64_t b = 0; b < p.batches; ++b) {
      if (by_batch[std::size_t(b)] == nullptr) todo.push_back(b);
      else done_before += p.end(b) - p.first(b);
    }
  });
  if (world_rank() == 0) {
    std::printf("prepare-data: %lld images in %zu classes, batches of %d over %d ranks, %d x %d pixels into %d x %d x %d "
                "latents (%s) on %s\nVAE: %s\n",
                static_cast<long long>(p.files()), p.folder.classes.size(), options.batch, world_size(), options.size,
                options.size, p.channels, p.side, p.side, p.latent_text().c_str(), p.compute.c_str(),
                p.vae.describe().c_str());
    if (p.encode_at_once < options.batch * p.copies)
      std::printf("memory: %d pictures encoded at once, not a batch's %d, to fit %s\n", p.encode_at_once,
                  options.batch * p.copies, p.memory_where.c_str());
    if (p.vae.force_upcast && options.precision != "fp32")
      std::printf("note: the VAE's config says force_upcast: it runs in fp32, not %s\n", options.precision.c_str());
    if (kept > 0)
      std::printf("resuming: %lld of %lld images done in %s\n", static_cast<long long>(done_before),
                  static_cast<long long>(p.files()), work.folder().c_str());
    std::fflush(stdout);
  }
  const std::string precision = p.compute.find(':') == std::string::npos ? "fp32" : p.compute.substr(p.compute.find(':') + 1);
  RankSetup rank = make_rank({.backend = options.backend, .precision = precision,
                              .layout = Layout{1, 1, world_size()}, .comms = TensorComms::Leave});
  encode_batches(p, todo, done_before, work, rank);
  PrepareResult result{options.out, 0, int(p.folder.classes.size())};
  collective_check([&] {
    if (world_rank() == 0) result = assemble(p, work);
  });
  return result;
}

}  // namespace dit

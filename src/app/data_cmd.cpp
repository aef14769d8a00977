// `dit_mp prepare-data` and `dit_mp inspect` (see data_cmd.h). prepare-data runs on rank 0, except
// images with --vae, which every rank encodes a share of (engine/image_latents.h).
#include "app/data_cmd.h"

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "engine/image_latents.h"
#include "io/atomic_file.h"
#include "io/command_files.h"
#include "io/checkpoint.h"
#include "io/file_roles.h"
#include "io/prepare.h"
#include "io/vae_weights.h"
#include "parallel/world.h"
#include "run/run_lock.h"

namespace dit {

namespace fs = std::filesystem;

namespace {

struct PrepareFlags {
  std::string kind, src, out, features, labels, split = "train";
  int size = 32;
  double scale = 0.18215;
  bool overwrite = false;
  // images with a VAE (engine/image_latents.h)
  std::string vae, vae_config, flips = "none", latent = "mean", bad_files = "fail", backend = "cpu",
      precision = "fp32";
  std::uint64_t seed = 0;
  int batch = 16;
  CLI::Option* size_option = nullptr;
};

// prepare-data's files by role (io/command_files.h), checked before any is read.
void check_prepare_files(const PrepareFlags& f) {
  check_command_files("prepare-data", [&](const FileDecl& d) -> std::string {
    const std::string o = d.option;
    return o == "@dir"        ? f.src
           : o == "--features" ? f.features
           : o == "--labels"   ? f.labels
           : o == "--vae"      ? f.vae
           : o == "--vae-config" ? vae_config_path(f.vae, f.vae_config)
                                 : f.out;
  });
}

// The VAE's flags as options (checked on every rank, before anything is read).
ImageLatentsOptions latent_options(const PrepareFlags& f) {
  auto one_of = [](const std::string& flag, const std::string& v, std::initializer_list<const char*> allowed) {
    std::string list;
    for (const char* a : allowed) {
      if (v == a) return;
      list += std::string(list.empty() ? "" : ", ") + a;
    }
    DIT_FAIL(flag, " ", v, ": expected one of ", list);
  };
  one_of("--flips", f.flips, {"none", "both"});
  one_of("--latent", f.latent, {"mean", "sample"});
  one_of("--bad-files", f.bad_files, {"fail", "skip"});
  one_of("--backend", f.backend, {"cpu", "cuda"});
  DIT_CHECK(!f.src.empty(), "prepare-data images: give the folder of class sub-folders");
  ImageLatentsOptions o;
  o.dir = f.src;
  o.out = f.out;
  o.vae = f.vae;
  o.vae_config = f.vae_config;
  o.size = f.size_option->count() > 0 ? f.size : 256;
  o.flips = f.flips == "both" ? Flips::Both : Flips::None;
  o.latent = f.latent == "sample" ? LatentDraw::Sample : LatentDraw::Mean;
  o.seed = f.seed;
  o.bad_files = f.bad_files == "skip" ? BadFiles::Skip : BadFiles::Fail;
  o.batch = f.batch;
  o.backend = f.backend;
  o.precision = f.precision;
  o.overwrite = f.overwrite ? Overwrite::Yes : Overwrite::No;
  o.bad_file_hint = " (--bad-files fail; --bad-files skip leaves such files out)";
  DIT_CHECK(o.size >= 1 && o.size <= 4096, "--size ", o.size, ": expected 1 to 4096");
  DIT_CHECK(o.batch >= 1 && o.batch <= 4096, "--batch ", o.batch, ": expected 1 to 4096");
  DIT_CHECK(o.precision == "fp32" || o.precision == "bf16" || o.precision == "fp16", "--precision ", o.precision,
            ": expected fp32, bf16 or fp16");
  check_writable_target(o.out, "dataset");
  DIT_CHECK(o.overwrite == Overwrite::Yes || !fs::exists(o.out), o.out,
            ": already exists; pass --overwrite to replace it");
  return o;
}

// Flags that mean something with a VAE only are refused without one.
void check_no_vae_flags(const CLI::App* cmd) {
  for (const char* flag : {"--vae-config", "--flips", "--latent", "--seed", "--bad-files", "--batch", "--backend",
                           "--precision"})
    DIT_CHECK(cmd->get_option(flag)->count() == 0, "prepare-data: ", flag, " applies to images with --vae only");
}

}  // namespace

std::function<int()> add_prepare_data_command(CLI::App& app) {
  auto f = std::make_shared<PrepareFlags>();
  CLI::App* cmd = app.add_subcommand(
      "prepare-data", "Write an HDF5 dataset: fashion-mnist, images DIR (pixels, or VAE latents with --vae), or latents");
  cmd->add_option("kind", f->kind, "fashion-mnist | images | latents")->required();
  cmd->add_option("dir", f->src, "images: a folder of class sub-folders; fashion-mnist: the IDX folder");
  cmd->add_option("--out", f->out, "Output HDF5 file")->required();
  cmd->add_option("--split", f->split, "fashion-mnist: train or test")->capture_default_str();
  f->size_option = cmd->add_option("--size", f->size, "images: output side in pixels (default 32; with --vae 256)");
  cmd->add_option("--features", f->features, "latents: folder of <i>.npy features (1, 4, H, W)");
  cmd->add_option("--labels", f->labels, "latents: folder of <i>.npy labels");
  cmd->add_option("--scale", f->scale, "latents: scale factor applied when training")->capture_default_str();
  cmd->add_flag("--overwrite", f->overwrite, "Replace an existing output file");
  cmd->add_option("--vae", f->vae,
                  "images: encode them with this VAE (diffusers' AutoencoderKL .safetensors) into a latent dataset, "
                  "split over the ranks, resumable");
  cmd->add_option("--vae-config", f->vae_config, "images --vae: the VAE's config.json when not beside its weights");
  cmd->add_option("--flips", f->flips, "images --vae: none, or both (each picture and its mirror image)")
      ->capture_default_str();
  cmd->add_option("--latent", f->latent, "images --vae: mean of the encoder's Gaussian, or a sample of it")
      ->capture_default_str();
  cmd->add_option("--seed", f->seed, "images --vae --latent sample: the noise's seed")->capture_default_str();
  cmd->add_option("--bad-files", f->bad_files,
                  "images --vae: fail on an unreadable picture (CMYK, truncated), or skip it and count it")
      ->capture_default_str();
  cmd->add_option("--batch", f->batch, "images --vae: pictures per VAE call and per record of the work folder")
      ->capture_default_str();
  cmd->add_option("--backend", f->backend, "images --vae: cpu or cuda")->capture_default_str();
  cmd->add_option("--precision", f->precision,
                  "images --vae: fp32, bf16 or fp16 (a VAE whose config says force_upcast runs in fp32)")
      ->capture_default_str();
  return [cmd, f] {
    if (!*cmd) return -1;
    const Overwrite ow = f->overwrite ? Overwrite::Yes : Overwrite::No;
    if (f->kind == "images" && !f->vae.empty()) {
      ImageLatentsOptions options;
      RunLock lock;  // <out>.lock on rank 0: two preparations never share an output or its work folder
      collective_check([&] {
        if (world_rank() == 0) check_prepare_files(*f);
        options = latent_options(*f);
        if (world_rank() != 0) return;
        std::string note;
        lock = RunLock::acquire(f->out, &note, {"dataset", "preparation", "--out"});
        if (!note.empty()) std::printf("note: %s\n", note.c_str());
      });
      const PrepareResult r = prepare_image_latents(options);
      if (world_rank() == 0) std::printf("wrote %s: %lld latents\n", r.path.c_str(), static_cast<long long>(r.samples));
      return 0;
    }
    collective_check([&] {
      if (world_rank() != 0) return;
      check_prepare_files(*f);
      check_no_vae_flags(cmd);
      if (f->kind == "fashion-mnist") {
        prepare_fashion_mnist(f->src.empty() ? kFashionMnistDir : f->src, f->out, f->split, ow);
      } else if (f->kind == "images") {
        DIT_CHECK(!f->src.empty(), "prepare-data images: give the folder of class sub-folders");
        prepare_images(f->src, f->out, f->size, ow);
      } else if (f->kind == "latents") {
        DIT_CHECK(!f->features.empty() && !f->labels.empty(), "prepare-data latents: give --features and --labels");
        prepare_latents(f->features, f->labels, f->out, f->scale, ow);
      } else {
        DIT_FAIL("prepare-data: unknown kind '", f->kind, "': expected fashion-mnist, images or latents");
      }
      std::printf("wrote %s\n", f->out.c_str());
    });
    return 0;
  };
}

std::function<int()> add_inspect_command(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  CLI::App* cmd =
      app.add_subcommand("inspect", "List a checkpoint's tensors, shapes, layout and step, verifying its checksums; "
                                    "or name the VAE a safetensors file holds");
  cmd->add_option("checkpoint", *path, "A checkpoint step folder (or its root), or a VAE's .safetensors")->required();
  return [cmd, path] {
    if (!*cmd) return -1;
    collective_check([&] {
      if (world_rank() != 0) return;
      check_single_input("inspect", *path);
      // Routed by what the path is, each kind to its own reader and its reasons: a checkpoint is a
      // folder (or its index.h5); a foreign or damaged HDF5 file is named as such; any other file
      // is read as the safetensors file it must then be, whose reader says what is wrong with it
      // (a header length past the file, a header that is not JSON, ...).
      const FileKind kind = detect_kind(*path);
      const bool hdf5 = kind == FileKind::OtherH5 || kind == FileKind::DamagedSeal;
      const bool index = fs::path(*path).filename() == "index.h5";
      DIT_CHECK(!hdf5 || index, "inspect: ", *path, " is ", kind_name(kind), ", expected a checkpoint folder (or its ",
                "index.h5) or a VAE's safetensors file");
      std::error_code ec;
      const bool file = kind != FileKind::Missing && kind != FileKind::Special && kind != FileKind::CheckpointIndex &&
                        !fs::is_directory(*path, ec) && !hdf5;
      if (file) {
        const VaeFile vae = open_vae(*path);
        std::int64_t params = 0;
        const VaeWeightSource read = vae.source();  // every value read: a NaN or Inf is named by its tensor
        for (const VaeParam& p : vae_parameters(vae.config)) params += std::int64_t(read(p).size());
        std::printf("%s\n%s\n%zu tensors, %lld parameters\n", vae.path.c_str(), vae.describe().c_str(),
                    vae.file->tensors().size(), static_cast<long long>(params));
        return;
      }
      std::printf("%s", inspect_checkpoint(*path).c_str());
    });
    return 0;
  };
}

}  // namespace dit

// `dit_mp prepare-data` and `dit_mp inspect` (see data_cmd.h).
#include "app/data_cmd.h"

#include <cstdio>
#include <memory>
#include <string>

#include "io/command_files.h"
#include "io/checkpoint.h"
#include "io/file_roles.h"
#include "io/prepare.h"
#include "io/vae_weights.h"
#include "parallel/world.h"

namespace dit {

namespace {

// prepare-data's files by role (io/command_files.h), checked before any is read.
void check_prepare_files(const std::string& src, const std::string& features, const std::string& labels,
                         const std::string& out) {
  check_command_files("prepare-data", [&](const FileDecl& d) -> std::string {
    const std::string o = d.option;
    return o == "@dir" ? src : o == "--features" ? features : o == "--labels" ? labels : out;
  });
}

}  // namespace

std::function<int()> add_prepare_data_command(CLI::App& app) {
  struct Flags {
    std::string kind, src, out, features, labels, split = "train";
    int size = 32;
    double scale = 0.18215;
    bool overwrite = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd =
      app.add_subcommand("prepare-data", "Write an HDF5 dataset: fashion-mnist, images DIR, or latents");
  cmd->add_option("kind", f->kind, "fashion-mnist | images | latents")->required();
  cmd->add_option("dir", f->src, "images: a folder of class sub-folders; fashion-mnist: the IDX folder");
  cmd->add_option("--out", f->out, "Output HDF5 file")->required();
  cmd->add_option("--split", f->split, "fashion-mnist: train or test")->capture_default_str();
  cmd->add_option("--size", f->size, "images: output side in pixels")->capture_default_str();
  cmd->add_option("--features", f->features, "latents: folder of <i>.npy features (1, 4, H, W)");
  cmd->add_option("--labels", f->labels, "latents: folder of <i>.npy labels");
  cmd->add_option("--scale", f->scale, "latents: scale factor applied when training")->capture_default_str();
  cmd->add_flag("--overwrite", f->overwrite, "Replace an existing output file");
  return [cmd, f] {
    if (!*cmd) return -1;
    const Overwrite ow = f->overwrite ? Overwrite::Yes : Overwrite::No;
    collective_check([&] {
      if (world_rank() != 0) return;
      check_prepare_files(f->src, f->features, f->labels, f->out);
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
      if (detect_kind(*path) == FileKind::Safetensors) {
        const VaeFile vae = open_vae(*path);
        std::int64_t params = 0;
        for (const VaeParam& p : vae_parameters(vae.config)) params += p.numel();
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

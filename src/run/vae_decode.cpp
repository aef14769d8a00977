// Decoding latent samples (see vae_decode.h).
#include "run/vae_decode.h"

#include <algorithm>

#include "backend/backend.h"
#include "core/arena.h"
#include "core/error.h"
#include "core/resources.h"
#include "layers/vae.h"
#include "parallel/device_placement.h"
#include "parallel/world.h"

namespace dit {

void check_vae_fits(const VaeFile& vae, int model_channels, const std::string& what) {
  DIT_CHECK(vae.config.latent_channels == model_channels, what, " ", vae.path, ": its latents have ",
            vae.config.latent_channels, " channels, the model's samples ", model_channels);
  DIT_CHECK(vae.config.out_channels == 1 || vae.config.out_channels == 3, what, " ", vae.path, ": it decodes to ",
            vae.config.out_channels, " channels; pictures have 1 or 3");
}

int decode_batch(const VaeConfig& cfg, std::int64_t h, std::int64_t w, int batch, double budget,
                 const std::string& where, BackendKind backend) {
  for (int b = std::max(batch, 1);; b /= 2) {  // halving: 8, 4, 2, 1
    const double need = static_cast<double>(vae_decode_bytes(cfg, DType::F32, b, h, w, backend));
    if (need <= budget) return b;
    if (b == 1)
      DIT_FAIL("decoding one latent of (", cfg.latent_channels, ", ", h, ", ", w, ") needs ", format_bytes(need),
               " (the VAE's parameters, activations and scratch, planned), more than ", where,
               "; give it a machine or job with more memory, or fewer ranks on one machine");
  }
}

std::vector<float> decode_latents(const VaeFile& vae, const std::string& backend, const std::vector<float>& latents,
                                  std::int64_t n, std::int64_t h, std::int64_t w, int batch, int ranks_here) {
  const VaeConfig& c = vae.config;
  const std::int64_t f = c.downsampling(), l = c.latent_channels, per_latent = l * h * w;
  const std::int64_t per_image = c.out_channels * h * f * w * f;
  DIT_CHECK(static_cast<std::int64_t>(latents.size()) == n * per_latent && batch > 0, "decode: ", latents.size(),
            " latent values for ", n, " latents of (", l, ", ", h, ", ", w, ")");
  std::unique_ptr<Backend> be = make_backend(backend, DType::F32);
  std::size_t free = 0, total = 0;
  const bool device = be->device_memory(&free, &total);
  // On the CPU: the tightest limit (a job's or container's memory cgroup, else the machine), less
  // what this rank already holds, so that a decode too large is one line rather than the OOM killer.
  const HostBudget host = device ? HostBudget{} : host_budget(ranks_here);
  const double budget = device ? 0.9 * static_cast<double>(free) : host.bytes;
  batch = decode_batch(c, h, w, std::min<std::int64_t>(batch, std::max<std::int64_t>(n, 1)), budget,
                       device ? format_bytes(budget) + " usable on the GPU" : host.where,
                       device ? BackendKind::Cuda : BackendKind::Cpu);
  Vae decoder(*be, c, vae.source());
  Arena arena(*be);
  std::vector<float> images(static_cast<std::size_t>(n * per_image));
  std::vector<float> z;
  for (std::int64_t first = 0; first < n; first += batch) {
    const std::int64_t b = std::min<std::int64_t>(batch, n - first);
    arena.reset();
    z.assign(latents.begin() + first * per_latent, latents.begin() + (first + b) * per_latent);
    if (vae.latents_mean.empty()) {
      for (float& v : z) v = static_cast<float>(v / vae.scaling_factor + vae.shift_factor);
    } else {  // per channel: x std_c / scale + mean_c (+ shift)
      for (std::size_t i = 0; i < z.size(); ++i) {
        const std::size_t ch = (i / static_cast<std::size_t>(h * w)) % static_cast<std::size_t>(l);
        z[i] = static_cast<float>(z[i] * vae.latents_std[ch] / vae.scaling_factor + vae.latents_mean[ch] +
                                  vae.shift_factor);
      }
    }
    Tensor zt = arena.tensor(Shape{b, l, h, w}, DType::F32);
    be->copy(zt, Tensor{z.data(), DType::F32, zt.shape, Device::Host});
    Tensor img = arena.tensor(Shape{b, c.out_channels, h * f, w * f}, DType::F32);
    decoder.decode(zt, img);
    be->copy(Tensor{images.data() + first * per_image, DType::F32, img.shape, Device::Host}, img);
    be->synchronize();
  }
  return images;
}

Rows decode_share(Comm& world, const VaeFile& vae, const std::string& backend, const Rows& latents, std::int64_t h,
                  std::int64_t w) {
  const VaeConfig& c = vae.config;
  const std::int64_t f = c.downsampling();
  const Rows mine = scatter_rows(world, latents);
  Rows images;
  images.n = mine.n;
  images.width = c.out_channels * h * f * w * f;
  const int ranks_here = place_rank_on_gpu().local_size;  // collective on its first call: every rank is here
  collective_check([&] {
    DIT_CHECK(mine.width == c.latent_channels * h * w, "decode: latents of ", mine.width, " values, the VAE's are (",
              c.latent_channels, ", ", h, ", ", w, ")");
    if (mine.n > 0) images.values = decode_latents(vae, backend, mine.values, mine.n, h, w, 8, ranks_here);
  });
  return images;
}

std::vector<float> decode_on_ranks(Comm& world, const VaeFile& vae, const std::string& backend,
                                   const std::vector<float>& latents, std::int64_t n, std::int64_t h, std::int64_t w) {
  const Rows mine = decode_share(world, vae, backend, {n, vae.config.latent_channels * h * w, latents}, h, w);
  return gather_rows(world, mine).values;
}

}  // namespace dit

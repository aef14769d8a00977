// Refusing runs that cannot fit before allocating for them: the host memory one rank needs
// (parameters and optimizer state, the step's activations, sampling), from the planner's and the
// sampler's own allocations on the virtual backend, compared with the machine's memory.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend_kind.h"
#include "core/dtype.h"
#include "core/error.h"
#include "io/config.h"
#include "layers/vae.h"
#include "engine/train_setup.h"
#include "engine/trainer.h"
#include "parallel/grid.h"
#include "plan/planner.h"

namespace dit {

// Host bytes one rank needs, by what asks for them, from the planner's numbers (plan/planner.h:
// one step of the real Trainer, and the sampler's passes, on the virtual backend).
struct MemoryNeed {
  double state = 0;        // parameters, grads, the ZeRO shards, the checkpoint's gathered copies
  double activations = 0;  // the step's activation arenas and scratch (kept between steps)
  double sampling = 0;     // the sample grid (or the evaluation's samples) drawn from the EMA
  double offloaded = 0;    // of `state`: the optimizer state optim.offload keeps in host memory
  double total() const { return state + activations + sampling; }
};

// What is sampled: `total` images of a request, `batch` of them at once (sample --batch; a run's
// sample grid is one batch), with the sampler settings of `sample` on a schedule of
// `diffusion_steps`.
struct SamplingSize {
  std::int64_t total = 0, batch = 0;
  SampleSection sample;
  int diffusion_steps = 1000;
  BackendKind backend = BackendKind::Cpu;
  DType precision = DType::F32;
  // The VAE the samples are decoded with (sample --vae, a latent run's data.vae), none without.
  std::optional<VaeConfig> vae;
};

// A training run's settings beyond its TrainSetup that its memory depends on: what it computes on,
// and the images it draws from the EMA at once (the sample grid, or the evaluation's samples when
// it evaluates during training and they are more).
struct RunDraws {
  PlanDevice device;
  SamplingSize drawn;
};
RunDraws run_draws(const RunConfig& cfg);

// The plan a run starts from, made once: one training step of `setup` on the virtual backend
// (plan_layout), checked against this machine. Throws, naming `settings` and the numbers, when
// `ranks_per_node` ranks cannot fit: first a bound from the parameter count alone (at once, for
// sizes far past any machine), then the planned need (parameters and optimizer state, the step's
// activations, the sampling). Returns every pipeline stage's account, which the run's first step
// is checked against; empty when the planner's one step would load more than 256 MiB of images
// (then the step is planned at micro-batches of 1 and 2 images and its activations extended
// linearly, for the check alone).
std::vector<MemoryAccount> plan_training(const TrainSetup& setup, const RunDraws& run, int ranks_per_node,
                                         const std::string& settings);
// Host bytes one rank needs to sample, from the sampler's own pass planned on the virtual backend
// (engine/sampler.h: sampler_bytes) at every pipeline stage, the largest kept. On the CUDA backend
// the weights and the pass are the GPU's and only the host buffers count.
// With a VAE on the CPU backend, its decode of one latent (its parameters, activations and
// scratch, and the decoded pictures), which comes after the sampling stage is freed.
struct SamplingNeed {
  double weights = 0;  // the stage's parameters in the compute dtype
  double pass = 0;     // the forward pass's activation arenas, scratch and workspace
  double host = 0;     // the sampler's host buffers and the gathered samples
  double decode = 0;   // the VAE's decode of one latent and the decoded pictures (0: no VAE, or on the GPU)
  double total() const { return std::max(weights + pass, decode) + host; }
};
SamplingNeed sampling_memory_need(const DiTConfig& model, const Layout& layout, const SamplingSize& size);
// Throws, naming `settings` and the numbers, when `ranks_per_node` ranks of `need` exceed the
// memory of this machine.
void check_sampling_fits(const SamplingNeed& need, const SamplingSize& size, int ranks_per_node,
                         const std::string& settings);

// Throws, naming the settings and the numbers, when `ranks_per_node` ranks of `need` exceed the
// memory of this machine.
void check_memory_fits(const MemoryNeed& need, int ranks_per_node, const std::string& settings);

}  // namespace dit

// Refusing runs that cannot fit before allocating for them: the host memory one rank needs
// (parameters and optimizer state, the step's activations, sampling), from the planner's and the
// sampler's own allocations on the virtual backend, compared with the machine's memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend_kind.h"
#include "core/dtype.h"
#include "core/error.h"
#include "io/config.h"
#include "engine/train_setup.h"
#include "engine/trainer.h"
#include "parallel/grid.h"

namespace dit {

// Host bytes one rank needs, by what asks for them, from the planner's numbers (plan/planner.h:
// one step of the real Trainer, and the sampler's passes, on the virtual backend).
struct MemoryNeed {
  double state = 0;        // parameters, grads, the ZeRO shards, the checkpoint's gathered copies
  double activations = 0;  // the step's activation arenas and scratch (kept between steps)
  double sampling = 0;     // the sample grid (or the evaluation's samples) drawn from the EMA
  double total() const { return state + activations + sampling; }
};

// What a run of `setup` (TrainSetup::make of `cfg`) holds on its largest stage. A micro-batch
// whose images would take the planner's own step past 256 MiB is planned at 1 and 2 images and
// its activations extended linearly.
MemoryNeed training_memory_need(const RunConfig& cfg, const TrainSetup& setup);
// The plan of every pipeline stage of `setup` (plan_layout's accounts, which a run's first step is
// checked against); empty when the planner's one step would load more than 256 MiB of images.
std::vector<MemoryAccount> planned_stage_memory(const RunConfig& cfg, const TrainSetup& setup);
// Throws, naming `settings` and the numbers, when a run cannot fit this machine: first a bound
// from the parameter count alone (at once, for sizes far past any machine), then the planned need.
void check_training_fits(const RunConfig& cfg, const TrainSetup& setup, int ranks_per_node,
                         const std::string& settings);

// What is sampled: `total` images of a request, `batch` of them at once (sample --batch; a run's
// sample grid is one batch), with the sampler settings of `sample` on a schedule of
// `diffusion_steps`.
struct SamplingSize {
  std::int64_t total = 0, batch = 0;
  SampleSection sample;
  int diffusion_steps = 1000;
  BackendKind backend = BackendKind::Cpu;
  DType precision = DType::F32;
};
// Host bytes one rank needs to sample, from the sampler's own pass planned on the virtual backend
// (engine/sampler.h: sampler_bytes) at every pipeline stage, the largest kept. On the CUDA backend
// the weights and the pass are the GPU's and only the host buffers count.
struct SamplingNeed {
  double weights = 0;  // the stage's parameters in the compute dtype
  double pass = 0;     // the forward pass's activation arenas, scratch and workspace
  double host = 0;     // the sampler's host buffers and the gathered samples
  double total() const { return weights + pass + host; }
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

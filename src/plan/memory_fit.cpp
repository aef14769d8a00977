// Memory bounds and the naming of allocation failures (see memory_fit.h).
#include "plan/memory_fit.h"

#include <algorithm>
#include <string>
#include <utility>

#include "core/resources.h"
#include "core/error.h"
#include "engine/dit_pipeline.h"
#include "engine/sampler.h"
#include "plan/planner.h"

namespace dit {


namespace {

// Host bytes of the images the planner's one step would load (BlankDataset): past this, the plan
// is made at micro-batches of 1 and 2 images and its activations extended linearly.
constexpr double kPlannedImagesBytes = 256.0 * (1 << 20);

// This rank's share of the parameters as the optimizer holds them, from the parameter count alone:
// fp32 values and grads, AdamW moments and EMA over dp (host memory unless on the GPU), and the
// four full fp32 copies (model, EMA, moments) a checkpoint gathers on the host.
double parameter_state_bytes(const TrainSetup& setup, BackendKind backend) {
  const Layout& l = setup.layout;
  const bool host = backend != BackendKind::Cuda;
  const double params = double(setup.model.num_params()) / (double(l.tp) * l.pp);
  const TrainConfig& t = setup.train;
  const double values = t.zero >= 3 ? 4.0 / l.dp : 4.0, grads = t.zero >= 2 ? 4.0 / l.dp : 4.0;
  // The state's 12 bytes (moments and EMA) are in host memory when offloaded, wherever the device is.
  return params * ((host ? values + grads : 0.0) + (host || t.offload ? 12.0 / l.dp : 0.0) + 16);
}

// The largest stage of a plan.
MemoryAccount peak_stage(const LayoutPlan& p) {
  MemoryAccount peak;
  for (const StagePlan& s : p.stages)
    if (s.mem.total() > peak.total()) peak = s.mem;
  return peak;
}

// The largest stage of the plan of `setup` with micro-batches of `micro_batch` images (the same
// number of microbatches).
MemoryAccount planned_stage_at(const TrainSetup& setup, const PlanDevice& device, int micro_batch) {
  TrainConfig t = setup.train;
  t.micro_batch = micro_batch;
  t.global_batch = std::int64_t(setup.layout.dp) * micro_batch * setup.batch.microbatches;
  return peak_stage(plan_layout(TrainSetup::make(setup.model, t, setup.layout), device));
}

}  // namespace

RunDraws run_draws(const RunConfig& cfg) {
  const DiTConfig& m = cfg.model.dit;
  const std::int64_t classes = cfg.sample.classes.empty() ? m.num_classes : std::int64_t(cfg.sample.classes.size());
  std::int64_t images = classes * cfg.sample.per_class;
  SampleSection drawn = cfg.sample;
  if (cfg.train.eval_every > 0 && std::int64_t(m.num_classes) * cfg.eval.per_class > images) {
    images = std::int64_t(m.num_classes) * cfg.eval.per_class;
    drawn.num_steps = cfg.eval.num_steps;
  }
  return {plan_device(cfg), {images, images, drawn, cfg.diffusion.steps, cfg.train.backend, cfg.train.precision, {}}};
}

std::vector<MemoryAccount> plan_training(const TrainSetup& setup, const RunDraws& run, int ranks_per_node,
                                         const std::string& settings) {
  const Layout& l = setup.layout;
  const DiTConfig& m = setup.model;
  const bool host = run.device.backend != BackendKind::Cuda;
  MemoryNeed bound;  // at once for sizes far past any machine, before the planner builds a stage
  bound.state = parameter_state_bytes(setup, run.device.backend);
  if (setup.train.offload)
    bound.offloaded = 12.0 * double(m.num_params()) / (double(l.tp) * l.pp * l.dp);  // as the bound counts it
  check_memory_fits(bound, ranks_per_node, settings);
  // The planner's numbers: one step of the real Trainer on the virtual backend.
  const int mb = setup.batch.micro_batch;
  const std::int64_t mbs = setup.batch.microbatches;
  std::vector<MemoryAccount> stages;
  MemoryAccount a;
  double activations = 0;
  const double image = double(m.in_channels) * m.input_size * m.input_size * 4;
  if (double(mb) * double(mbs) * image <= kPlannedImagesBytes) {
    const LayoutPlan p = plan_layout(setup, run.device);
    for (const StagePlan& s : p.stages) stages.push_back(s.mem);
    a = peak_stage(p);
    activations = double(a.activations + a.workspace);
  } else {  // activations and workspace grow with the micro-batch, the rest does not
    const MemoryAccount one = planned_stage_at(setup, run.device, 1), two = planned_stage_at(setup, run.device, 2);
    const auto act = [](const MemoryAccount& x) { return double(x.activations + x.workspace); };
    a = one;
    activations = act(one) + (act(two) - act(one)) * double(mb - 1);
  }
  MemoryNeed need;
  need.state = (host ? double(a.params + a.grads + a.master + a.exp_avg + a.exp_avg_sq + a.ema) : 0.0) +
               double(a.host) +  // the offloaded optimizer state
               checkpoint_host_bytes(double(m.num_params()) / (double(l.tp) * l.pp), l.dp, largest_tensor_params(m, l.tp),
                                     host || setup.train.offload);  // what a checkpoint save holds
  need.offloaded = double(a.host);
  need.activations = host ? activations : 0.0;
  // The sample grid, and the evaluation's samples when evaluated during training, drawn from the
  // EMA in a stage of its own (its weights gathered in fp32 first).
  need.sampling =
      sampling_memory_need(m, l, run.drawn).total() + 4.0 * double(m.num_params()) / (double(l.tp) * l.pp);
  check_memory_fits(need, ranks_per_node, settings);
  return stages;
}

SamplingNeed sampling_memory_need(const DiTConfig& m, const Layout& l, const SamplingSize& size) {
  SamplingNeed need;
  const bool host = size.backend != BackendKind::Cuda;
  const auto chunks = partition_stages(m, l.pp);
  for (int s = 0; s < l.pp; ++s) {
    VirtualBackend be(size.precision, planned_attention(size.backend));
    ParallelContext ctx = planning_context(l, s);
    const DiTStage stage(be, m, chunks[std::size_t(s)], *ctx.tp, l.dp, StageOptions::forward_only());
    const double weights = double(be.allocated_bytes());
    const SamplerBytes b =
        sampler_bytes(be, ctx, stage, sample_request(size.sample, {}, size.diffusion_steps, false), size.batch, size.total);
    const SamplingNeed here{host ? weights : 0, host ? double(b.backend) : 0, double(b.host)};
    if (here.total() > need.total()) need = here;
  }
  if (size.vae && host) {
    const VaeConfig& v = *size.vae;
    const std::int64_t side = m.input_size, f = v.downsampling();
    need.decode = double(vae_decode_bytes(v, DType::F32, 1, side, side, BackendKind::Cpu)) +
                  4.0 * double(size.total) * double(v.out_channels) * double(side * f) * double(side * f);
  }
  return need;
}

namespace {
// What the ranks of a node may use: the machine's memory, or this process's memory cgroup's limit
// where tighter (a SLURM job's --mem, a container's limit), and how to say so after "x N ranks".
std::pair<double, std::string> node_memory() {
  const HostMemory h = host_memory();
  const double limit = h.limit > 0 ? h.limit : machine_memory_bytes();
  const bool cgroup = std::string(h.source) == "cgroup";
  return {limit, (cgroup ? " ranks in this memory cgroup (a job's or container's limit), which allows "
                         : " ranks on this machine, which has ") + format_bytes(limit)};
}
}  // namespace

void check_sampling_fits(const SamplingNeed& need, const SamplingSize& size, int ranks_per_node,
                         const std::string& settings) {
  const auto [limit, where] = node_memory();
  if (limit <= 0 || need.total() * ranks_per_node <= limit) return;
  const std::string decode =
      need.decode > 0 ? ", then the VAE's decode of one latent and the pictures " + format_bytes(need.decode) +
                            " (the VAE's size: no batch lowers it)"
                      : "";
  DIT_FAIL("sampling ", size.total, " images, ", size.batch, " at once, needs at least ", format_bytes(need.total()),
           " per rank (weights ", format_bytes(need.weights), ", the forward pass ", format_bytes(need.pass),
           ", the sampler's host buffers and samples ", format_bytes(need.host), decode, ") x ", ranks_per_node, where,
           "; lower ", settings, " or use more machines");
}

void check_memory_fits(const MemoryNeed& need, int ranks_per_node, const std::string& settings) {
  const auto [limit, where] = node_memory();
  if (limit <= 0 || need.total() * ranks_per_node <= limit) return;
  const std::string offloaded =
      need.offloaded > 0 ? " (" + format_bytes(need.offloaded) + " of it the optimizer state optim.offload = \"cpu\" "
                                                                   "keeps in host memory)"
                         : "";
  // Only the parts counted: the first bound counts the state alone, and on a GPU the activations
  // are the device's (a "0 B" row would read as a measurement).
  std::string parts = "parameters and optimizer state " + format_bytes(need.state) + offloaded;
  if (need.activations > 0) parts += ", training activations " + format_bytes(need.activations);
  if (need.sampling > 0) parts += ", sampling " + format_bytes(need.sampling);
  DIT_FAIL("the run needs at least ", format_bytes(need.total()), " per rank (", parts, ") x ", ranks_per_node, where,
           "; lower ", settings, " or use more machines");
}

}  // namespace dit

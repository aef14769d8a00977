// Memory bounds and the naming of allocation failures (see memory_fit.h).
#include "plan/memory_fit.h"

#include <algorithm>

#include "core/resources.h"
#include "core/error.h"
#include "engine/dit_pipeline.h"
#include "engine/sampler.h"
#include "plan/planner.h"

namespace dit {


MemoryNeed training_memory_need(const RunConfig& cfg, const Layout& l) {
  const DiTConfig& m = cfg.model.dit;
  MemoryNeed need;
  // This rank's share of the parameters: fp32 values and grads, AdamW moments and EMA over dp,
  // and the four full fp32 copies (model, EMA, moments) a checkpoint gathers. On the CUDA backend
  // only the gathered copies and the samples are host memory (the rest is the GPU's).
  const bool host = cfg.train.backend != BackendKind::Cuda;
  const double params = double(m.num_params()) / (double(l.tp) * l.pp);
  need.state = params * ((host ? 4 + 4 + 12.0 / l.dp : 0.0) + 16);
  // Activations: at least the residual stream and the MLP input of every block of a stage, for
  // every microbatch in flight (1F1B keeps at most pp, GPipe all of them).
  const std::int64_t microbatches = std::max<std::int64_t>(1, cfg.train.global_batch / (std::int64_t(l.dp) * cfg.train.micro_batch));
  const double in_flight = cfg.parallel.schedule == ScheduleKind::GPipe ? double(microbatches)
                                                            : double(std::min<std::int64_t>(l.pp, microbatches));
  const double tokens = double(cfg.train.micro_batch) * m.num_patches();
  need.activations = (host ? 1.0 : 0.0) * in_flight * tokens * (2.0 * m.hidden_size + double(m.mlp_hidden()) / l.tp) * 4.0 *
                     (double(m.depth) / l.pp);
  const std::int64_t classes = cfg.sample.classes.empty() ? m.num_classes : std::int64_t(cfg.sample.classes.size());
  const std::int64_t images = classes * cfg.sample.per_class;
  need.sampling = sampling_memory_need(m, l, {images, images, cfg.sample, cfg.diffusion.steps, cfg.train.backend,
                                              cfg.train.precision})
                      .total();
  return need;
}

SamplingNeed sampling_memory_need(const DiTConfig& m, const Layout& l, const SamplingSize& size) {
  SamplingNeed need;
  const bool host = size.backend != BackendKind::Cuda;
  const auto chunks = partition_stages(m, l.pp);
  for (int s = 0; s < l.pp; ++s) {
    VirtualBackend be(size.precision, planned_attention(size.backend));
    ParallelContext ctx = planning_context(l, s);
    const DiTStage stage(be, m, chunks[std::size_t(s)], *ctx.tp, l.dp);
    const double weights = double(be.allocated_bytes());
    const SamplerBytes b =
        sampler_bytes(be, ctx, stage, sample_request(size.sample, {}, size.diffusion_steps), size.batch, size.total);
    const SamplingNeed here{host ? weights : 0, host ? double(b.backend) : 0, double(b.host)};
    if (here.total() > need.total()) need = here;
  }
  return need;
}

void check_sampling_fits(const SamplingNeed& need, const SamplingSize& size, int ranks_per_node,
                         const std::string& settings) {
  const double machine = machine_memory_bytes();
  if (machine <= 0 || need.total() * ranks_per_node <= machine) return;
  DIT_FAIL("sampling ", size.total, " images, ", size.batch, " at once, needs at least ", format_bytes(need.total()),
           " per rank (weights ", format_bytes(need.weights), ", the forward pass ", format_bytes(need.pass),
           ", the sampler's host buffers and samples ", format_bytes(need.host), ") x ", ranks_per_node,
           " ranks on this machine, which has ", format_bytes(machine), "; lower ", settings,
           " or use more machines");
}

void check_memory_fits(const MemoryNeed& need, int ranks_per_node, const std::string& settings) {
  const double machine = machine_memory_bytes();
  if (machine <= 0 || need.total() * ranks_per_node <= machine) return;
  DIT_FAIL("the run needs at least ", format_bytes(need.total()), " per rank (parameters and optimizer state ",
           format_bytes(need.state), ", training activations ", format_bytes(need.activations), ", sampling ",
           format_bytes(need.sampling), ") x ", ranks_per_node, " ranks on this machine, which has ",
           format_bytes(machine), "; lower ", settings, " or use more machines");
}

}  // namespace dit

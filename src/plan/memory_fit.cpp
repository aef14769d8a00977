// Memory bounds and the naming of allocation failures (see memory_fit.h).
#include "plan/memory_fit.h"

#include <algorithm>

#include "core/resources.h"
#include "core/error.h"

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
  need.sampling = sampling_memory_need(m, l, classes * cfg.sample.per_class).sampling;
  return need;
}

MemoryNeed sampling_memory_need(const DiTConfig& m, const Layout& l, std::int64_t images) {
  MemoryNeed need;
  need.state = double(m.num_params()) / (double(l.tp) * l.pp) * 4;
  // Every rank holds all samples (x and the model output); a dp replica runs its share of the
  // guided (doubled) batch through the residual stream.
  const double image = double(m.in_channels) * m.input_size * m.input_size * 4;
  need.sampling = double(images) * image * 3 + 2.0 * double(images) / l.dp * m.num_patches() * m.hidden_size * 4;
  return need;
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

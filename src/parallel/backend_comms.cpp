// Chooses the communicators for a backend's tensors (see backend_comms.h).
#include "parallel/backend_comms.h"

#include <memory>
#include <utility>

#include "parallel/staged_comm.h"

namespace dit {

namespace {
void stage_all(ParallelContext& ctx, Backend& be) {
  for (std::unique_ptr<Comm>* c : {&ctx.world, &ctx.tp, &ctx.pp, &ctx.dp})
    *c = std::make_unique<StagedComm>(std::move(*c), be);
}
}  // namespace

std::string attach_backend_comms(ParallelContext& ctx, Backend& be) {
  if (be.device() == Device::Host && be.compute_dtype() == DType::F32) return "mpi";
  stage_all(ctx, be);
  if (be.device() == Device::Host)
    return "mpi, host-staged (" + std::string(dtype_name(be.compute_dtype())) + " storage)";
  return "mpi, host-staged (GPU tensors)";
}

}  // namespace dit

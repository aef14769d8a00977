// Chooses the communicators for a backend's tensors (see backend_comms.h).
#include "parallel/backend_comms.h"

#include <memory>
#include <utility>

#include "parallel/device_placement.h"
#include "parallel/mpi_comm.h"
#include "parallel/nccl_comm.h"
#include "parallel/staged_comm.h"
#ifdef DIT_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace dit {

namespace {

void stage(std::unique_ptr<Comm>& c, Backend& be) { c = std::make_unique<StagedComm>(std::move(c), be); }

void stage_all(ParallelContext& ctx, Backend& be) {
  for (std::unique_ptr<Comm>* c : {&ctx.world, &ctx.tp, &ctx.pp, &ctx.dp}) stage(*c, be);
}

#ifdef DIT_HAVE_CUDA
// An MPI communicator becomes a NCCL one; anything else (a single rank's SelfComm) is staged.
void to_nccl(std::unique_ptr<Comm>& c, CudaBackend& be, bool point_to_point) {
  if (!dynamic_cast<MpiComm*>(c.get())) return stage(c, be);
  std::unique_ptr<MpiComm> mpi(static_cast<MpiComm*>(c.release()));
  NcclCommOptions o;
  o.point_to_point = point_to_point;
  c = make_nccl_comm(std::move(mpi), be, o);
}
#endif

}  // namespace

std::string attach_backend_comms(ParallelContext& ctx, Backend& be) {
  if (be.device() == Device::Host) {
    if (be.compute_dtype() == DType::F32) return "mpi";
    stage_all(ctx, be);
    return "mpi, host-staged (" + std::string(dtype_name(be.compute_dtype())) + " storage)";
  }
#ifdef DIT_HAVE_CUDA
  auto* cuda = dynamic_cast<CudaBackend*>(&be);
  DIT_CHECK(cuda != nullptr, "attach_backend_comms: a device backend that is not the CUDA backend");
  std::string why = "a process without MPI";
  const bool mpi = mpi_running();
  const DevicePlacement placement = mpi ? place_rank_on_gpu() : DevicePlacement{};
  const bool nccl = mpi && nccl_usable(placement, &why);
  DIT_CHECK(nccl || placement.comm_mode != CommMode::Nccl, "DIT_COMM=nccl, but NCCL cannot run here: ",
            why);
  if (nccl) {
    // The same order on every rank: NCCL communicator creation is collective. The world carries
    // host data only (statistics, agreed errors), so it stays on MPI, staged for safety.
    stage(ctx.world, be);
    to_nccl(ctx.tp, *cuda, false);
    to_nccl(ctx.pp, *cuda, true);
    to_nccl(ctx.dp, *cuda, false);
    return "nccl";
  }
  stage_all(ctx, be);
  return "mpi, host-staged (" + why + ")";
#else
  DIT_FAIL("attach_backend_comms: device tensors in a build without CUDA");
#endif
}

}  // namespace dit

// Comm over NCCL for one GPU per rank: device tensors travel through NCCL on the CUDA backend's
// stream (ordered with its kernels, no host synchronization); host tensors and the host-double
// calls go to the wrapped MpiComm. Host code includes this header without the CUDA headers.
//
// Pipeline point-to-point runs on four "lanes", each its own two-rank NCCL communicator and CUDA
// stream: a message between neighbours s and s+1 uses lane 2 * (s % 2) + (0 upward | 1 downward).
// So every lane of a rank carries the messages of one neighbour in one direction, and the two ends
// of a lane hold the same message sequence (see nccl_comm.cpp for why this cannot deadlock).
#pragma once

#include <memory>

#include "parallel/comm.h"
#include "parallel/mpi_comm.h"

namespace dit {

// The lane of a message from pipeline rank `from` to its neighbour `to` (|from - to| == 1):
// 2 * (min(from, to) % 2) + (to < from ? 1 : 0). Pure arithmetic, for tests and the comm alike.
constexpr int kP2pLanes = 4;
int p2p_lane(int from, int to);

#ifdef DIT_HAVE_CUDA

class CudaBackend;

struct NcclCommOptions {
  // Build the point-to-point lanes (collective at construction, a few extra NCCL communicators).
  // The pipeline communicator needs them; tensor/data-parallel communicators can go without.
  bool point_to_point = true;
  // Build a NCCL communicator even for a single rank (normally a one-rank comm copies locally and
  // touches no NCCL): lets a test on one GPU run every NCCL collective call for real.
  bool nccl_for_one_rank = false;
};

// Collective over the ranks of `mpi` (each on its own GPU, the backend's device; see
// place_rank_on_gpu): rank 0 makes the NCCL id, MPI_Bcast shares it, ncclCommInitRank joins.
// Collectives on device tensors (fp32, bf16, fp16, int32) are issued on be.stream(); all_gather
// and reduce_scatter_sum may run in place (in/out being this rank's block of out/in).
// isend/irecv on device tensors connect pipeline neighbours only (|peer - rank| == 1), match in
// posting order per neighbour and direction (tags are checked by nothing: both sides must post
// the same sequence, as the pipeline executor does), and never block the host. wait() makes the
// backend stream wait for the message (cudaStreamWaitEvent): work queued on that stream after
// wait() sees a received tensor and may overwrite a sent one. Host code reading a received tensor
// synchronizes the backend first, as for any kernel output. A send completes only when the peer
// receives it, so while a pipeline step runs, synchronize the backend's stream only, never the
// whole device (cudaDeviceSynchronize, cudaFree): see nccl_comm.cpp.
// CommStats: bytes and calls as MpiComm counts them (host-tensor calls included); seconds is the
// host time inside the calls, which for NCCL only enqueue work. A one-rank comm without NCCL
// counts no device-tensor call (nothing moves).
// The communicators are created and destroyed in a fixed order; every rank must create and
// destroy its NCCL comms (tp, pp, dp, ...) in the same order.
std::unique_ptr<Comm> make_nccl_comm(std::unique_ptr<MpiComm> mpi, CudaBackend& be,
                                     const NcclCommOptions& options = {});

#endif  // DIT_HAVE_CUDA

}  // namespace dit

// Rank -> GPU placement: which GPU of its node each MPI rank drives, and whether NCCL can work
// there. NCCL refuses two ranks on one GPU, so where ranks share GPUs the caller falls back to MPI
// with host staging. Host code includes this header without CUDA; a CPU-only build sees no GPU.
#pragma once

#include <string>

namespace dit {

enum class CommMode : int { Auto = 0, Nccl = 1, Mpi = 2 };  // DIT_COMM, agreed over the job

struct DevicePlacement {
  int local_rank = 0;  // rank among the ranks of this node (MPI_COMM_TYPE_SHARED)
  int local_size = 1;  // ranks on this node
  int devices = 0;     // CUDA devices this rank sees (0: no usable GPU, or a CPU-only build)
  int device = -1;     // the device this rank now drives: local_rank % devices; -1 without GPU
  int min_devices = 0;  // the fewest devices any rank of the job sees (agreed over the world)
  bool shared = false;  // some node of the job runs two ranks on one GPU (agreed over the world)
  CommMode comm_mode = CommMode::Auto;  // DIT_COMM (unset: auto), the same on every rank
};

// Collective over MPI_COMM_WORLD on its first call (every rank calls it, after MPI_Init and before
// the CUDA backend is created); later calls return the same placement without communicating.
// Throws on every rank when DIT_COMM is invalid or differs between ranks. Picks
// device = local_rank % devices and makes it current (cudaSetDevice). `shared` compares the PCI bus ids of the chosen devices within each node, as NCCL does, so a
// launcher that gives each rank one GPU through CUDA_VISIBLE_DEVICES (devices == 1 everywhere)
// is not mistaken for sharing; if any node shares, every rank gets shared == true.
DevicePlacement place_rank_on_gpu();

// DIT_COMM of every rank (unset: auto), agreed over MPI_COMM_WORLD (collective): throws on every
// rank when some rank has a value other than auto, nccl or mpi, or when the ranks differ.
CommMode agree_comm_mode();

// Whether NCCL can carry this job's device tensors; when not, *why says why (a rank without a
// GPU, ranks sharing a GPU, DIT_COMM=mpi, a build without CUDA). Every input is agreed over the
// world, so all ranks get the same answer.
bool nccl_usable(const DevicePlacement& p, std::string* why = nullptr);

}  // namespace dit

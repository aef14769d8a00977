// Rank -> GPU placement (see device_placement.h): node-local rank from MPI, device = local rank
// modulo the visible devices, and a world-wide agreement on whether ranks share a GPU.
#include "parallel/device_placement.h"

#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"

#ifdef DIT_HAVE_CUDA
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#endif

namespace dit {

namespace {

constexpr int kBusIdChars = 32;  // "0000:3b:00.0" with room to spare

// True when two ranks of this node chose the same physical GPU (equal PCI bus ids). Collective
// over `local`; a rank without a GPU contributes an empty id.
bool node_shares_gpu(MPI_Comm local, int local_size, const char (&bus_id)[kBusIdChars]) {
  std::vector<char> all(static_cast<std::size_t>(local_size) * kBusIdChars);
  DIT_MPI_CHECK(MPI_Allgather(bus_id, kBusIdChars, MPI_CHAR, all.data(), kBusIdChars, MPI_CHAR,
                              local));
  std::vector<std::string> ids;
  for (int r = 0; r < local_size; ++r) {
    std::string id(&all[static_cast<std::size_t>(r) * kBusIdChars]);
    if (!id.empty()) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  return std::adjacent_find(ids.begin(), ids.end()) != ids.end();
}

// DIT_COMM of this rank: 0 auto (or unset), 1 nccl, 2 mpi, -1 anything else.
int comm_mode_code() {
  const char* env = std::getenv("DIT_COMM");
  const std::string_view mode = env ? env : "";
  if (mode.empty() || mode == "auto") return 0;
  if (mode == "nccl") return 1;
  if (mode == "mpi") return 2;
  return -1;
}

DevicePlacement place() {
  DevicePlacement p;
  int world_rank = 0;
  DIT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  MPI_Comm local;
  DIT_MPI_CHECK(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &local));
  DIT_MPI_CHECK(MPI_Comm_rank(local, &p.local_rank));
  DIT_MPI_CHECK(MPI_Comm_size(local, &p.local_size));

  char bus_id[kBusIdChars] = {};
#ifdef DIT_HAVE_CUDA
  p.devices = cuda::device_count();
  if (p.devices > 0) {
    p.device = p.local_rank % p.devices;
    DIT_CUDA_CHECK(cudaSetDevice(p.device));
    DIT_CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, kBusIdChars - 1, p.device));
  }
#endif
  // Collective on every rank whatever its devices, so no rank waits for one that skipped it.
  int shares = 0;
  try {
    shares = node_shares_gpu(local, p.local_size, bus_id) ? 1 : 0;
  } catch (...) {
    MPI_Comm_free(&local);
    throw;
  }
  MPI_Comm_free(&local);
  int any = 0;
  DIT_MPI_CHECK(MPI_Allreduce(&shares, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  p.shared = any != 0;
  DIT_MPI_CHECK(MPI_Allreduce(&p.devices, &p.min_devices, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  p.comm_mode = agree_comm_mode();
  return p;
}

}  // namespace

CommMode agree_comm_mode() {
  // DIT_COMM must be the same everywhere (mpirun forwards a variable to other nodes only with
  // -x): a job split between NCCL and MPI would hang. Every rank reaches the same verdict.
  int modes[2] = {comm_mode_code(), 0}, lo_hi[2] = {0, 0};
  modes[1] = -modes[0];
  DIT_MPI_CHECK(MPI_Allreduce(modes, lo_hi, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  DIT_CHECK(lo_hi[0] >= 0, "DIT_COMM is set to something other than auto, nccl or mpi on some rank");
  DIT_CHECK(lo_hi[0] == -lo_hi[1], "DIT_COMM differs between the ranks of the job; set it on every "
            "rank (mpirun -x DIT_COMM=...)");
  return static_cast<CommMode>(lo_hi[0]);
}

DevicePlacement place_rank_on_gpu() {
  static const DevicePlacement placed = place();  // collective on the first call only
  return placed;
}

bool nccl_usable(const DevicePlacement& p, std::string* why) {
  auto no = [&](std::string reason) {
    if (why) *why = std::move(reason);
    return false;
  };
#ifndef DIT_HAVE_CUDA
  return no("this build has no CUDA (configured with DIT_CUDA=OFF or without nvcc)");
#else
  if (p.comm_mode == CommMode::Mpi) return no("DIT_COMM=mpi asks for MPI");
  if (p.min_devices == 0)
    return no(p.devices == 0 ? "no usable CUDA device on this rank"
                             : "some rank of the job has no usable CUDA device");
  if (p.shared)
    return no("ranks share a GPU (" + std::to_string(p.local_size) + " ranks on a node with " +
              std::to_string(p.devices) + " visible GPU(s)); NCCL needs one GPU per rank");
  if (why) why->clear();
  return true;
#endif
}

}  // namespace dit

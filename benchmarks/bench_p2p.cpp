// The point-to-point link between two MPI ranks, through the project's MpiComm (the calls the
// pipeline executor makes): ping-pong of 1 KiB .. 4 MiB fp32 messages, printing one-way latency and
// bandwidth, and the fitted link model (latency_us, gbps) the scaling predictor takes.
//   mpirun -n 2 build/bin/bench_p2p
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "parallel/mpi_comm.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  {
    auto world = dit::MpiComm::world();
    const int me = world->rank();
    if (world->size() != 2) {
      if (me == 0) std::fprintf(stderr, "bench_p2p: run with exactly 2 ranks (mpirun -n 2)\n");
      MPI_Finalize();
      return 2;
    }
    std::vector<double> sizes, times;
    for (std::int64_t n = 256; n <= (1 << 20); n *= 4) {
      std::vector<float> buf(static_cast<std::size_t>(n), 1.f);
      const dit::Tensor x{buf.data(), dit::DType::F32, {n}, dit::Device::Host};
      const int reps = n >= (1 << 18) ? 20 : 200;
      double best = 1e30;
      for (int trial = 0; trial < 3; ++trial) {
        world->barrier();
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < reps; ++i) {
          dit::Request r = me == 0 ? world->isend(x, 1, i) : world->irecv(x, 0, i);
          world->wait(r);
          r = me == 0 ? world->irecv(x, 1, i) : world->isend(x, 0, i);
          world->wait(r);
        }
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::min(best, s / (2.0 * reps));  // one way
      }
      sizes.push_back(4.0 * n);
      times.push_back(best);
      if (me == 0) std::printf("bytes %10.0f  one-way %9.2f us  %7.3f GB/s\n", 4.0 * n, best * 1e6, 4.0 * n / best / 1e9);
    }
    // Least squares t = latency + bytes / bandwidth.
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    const double k = static_cast<double>(sizes.size());
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      sx += sizes[i];
      sy += times[i];
      sxx += sizes[i] * sizes[i];
      sxy += sizes[i] * times[i];
    }
    const double slope = (k * sxy - sx * sy) / (k * sxx - sx * sx), icept = (sy - slope * sx) / k;
    if (me == 0)
      std::printf("fit: latency_us = %.3f, gbps = %.3f\n", std::max(0.0, icept) * 1e6, 1.0 / slope / 1e9);
  }
  MPI_Finalize();
  return 0;
}

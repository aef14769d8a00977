// CPU GEMM throughput: the CPU backend's gemm() next to Eigen and to OpenBLAS cblas_sgemm called
// directly, same shapes, same run. Shapes are the DiT ones (rows = batch x tokens) plus the square 1024^3 reference.
//   build/bin/bench_gemm --benchmark_counters_tabular=true
// Reports GFLOP/s per case; compare the two columns of one run, never across runs.
#include <benchmark/benchmark.h>

#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/philox.h"

#ifdef DIT_BENCH_CBLAS
extern "C" {
#include <cblas-openblas.h>
}
#endif

namespace {

struct Operands {
  std::vector<float> a, b, c;
  Operands(std::int64_t m, std::int64_t n, std::int64_t k) : a(m * k), b(k * n), c(m * n) {
    dit::Philox rng(1, dit::RngPurpose::Test, 0, 0);
    for (auto& v : a) v = rng.uniform() - 0.5f;
    for (auto& v : b) v = rng.uniform() - 0.5f;
  }
};

// y (m, n) = x (m, k) W^T with W (n, k): the linear-layer forward shape, through the backend.
void BM_BackendGemm(benchmark::State& state) {
  const std::int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  Operands o(m, n, k);
  dit::CpuBackend cpu;
  dit::Backend& be = cpu;  // the interface carries the default alpha
  const dit::Tensor a{o.a.data(), dit::DType::F32, {m, k}, dit::Device::Host};
  const dit::Tensor b{o.b.data(), dit::DType::F32, {n, k}, dit::Device::Host};
  const dit::Tensor c{o.c.data(), dit::DType::F32, {m, n}, dit::Device::Host};
  for (auto _ : state) be.gemm(a, dit::Transpose::No, b, dit::Transpose::Yes, c, dit::Accumulate::Overwrite);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}

// The same through Eigen (the attention's inner GEMMs).
void BM_EigenGemm(benchmark::State& state) {
  const std::int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  Operands o(m, n, k);
  for (auto _ : state)
    dit::cpu_sgemm(dit::Transpose::No, dit::Transpose::Yes, m, n, k, 1.f, o.a.data(), k,
                   o.b.data(), k, 0.f, o.c.data(), n);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}

#ifdef DIT_BENCH_CBLAS
void BM_OpenBlasSgemm(benchmark::State& state) {
  const std::int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  Operands o(m, n, k);
  for (auto _ : state)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.f, o.a.data(), k, o.b.data(),
                k, 0.f, o.c.data(), n);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}
#endif

void shapes(benchmark::internal::Benchmark* b) {
  b->Args({1024, 1024, 1024});  // the machine-ceiling reference
  b->Args({8 * 64, 3 * 384, 384});   // DiT-S/4 qkv, batch 8
  b->Args({8 * 64, 1536, 384});      // DiT-S/4 fc1
  b->Args({8 * 256, 768, 3072});     // DiT-B/2 fc2
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_BackendGemm)->Apply(shapes);
BENCHMARK(BM_EigenGemm)->Apply(shapes);
#ifdef DIT_BENCH_CBLAS
BENCHMARK(BM_OpenBlasSgemm)->Apply(shapes);
#endif
BENCHMARK_MAIN();

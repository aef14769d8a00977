// CPU GEMM throughput: the CPU backend's gemm() next to each GEMM kernel it has (packed avx512 and
// avx2, Eigen; backend/cpu/packed_gemm.h) and to OpenBLAS cblas_sgemm called directly, same shapes,
// same run, and the cores' FMA peak measured in the same run (BM_FmaPeak: every OpenMP thread
// runs independent FMAs of the widest vectors the CPU has). Shapes are the DiT ones (rows = batch
// x tokens) plus the square 1024^3 reference.
//   OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 build/bin/bench_gemm --benchmark_counters_tabular=true
//   benchmarks/gemm.sh   # 1 and 2 threads, each as a share of the peak
// Reports GFLOP/s per case; compare the columns of one run, never across runs.
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <omp.h>

#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/packed_gemm.h"
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

// The same product on one kernel (range 3: the GemmKernel).
void BM_KernelGemm(benchmark::State& state) {
  const std::int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const auto kernel = static_cast<dit::cpu::GemmKernel>(state.range(3));
  state.SetLabel(dit::cpu::gemm_kernel_name(kernel));
  Operands o(m, n, k);
  for (auto _ : state)
    dit::cpu::sgemm_on(kernel, dit::Transpose::No, dit::Transpose::Yes, m, n, k, 1.f, o.a.data(), k, o.b.data(), k,
                       0.f, o.c.data(), n);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}

// The cores' FMA peak: each OpenMP thread runs 24 independent chains of FMAs on the widest
// vectors the CPU has (512 bits with AVX-512F, else 256), 2 x 16 (or 8) FLOPs each.
#define DIT_FMA_CHAINS(V, LANES, FMA, SET)                    \
  V acc[24];                                                  \
  const V x = SET(0.999999f), y = SET(1e-7f);                 \
  for (auto& v : acc) v = SET(1.f);                           \
  for (std::int64_t i = 0; i < iters; ++i)                    \
    _Pragma("GCC unroll 24") for (auto& v : acc) v = FMA(v, x, y); \
  float sink = 0;                                             \
  for (auto& v : acc) sink += reinterpret_cast<const float*>(&v)[0]; \
  benchmark::DoNotOptimize(sink);                             \
  return 2.0 * LANES * 24 * static_cast<double>(iters);

__attribute__((target("avx512f"))) double fma_chains512(std::int64_t iters) {
  DIT_FMA_CHAINS(__m512, 16, _mm512_fmadd_ps, _mm512_set1_ps)
}
__attribute__((target("avx2,fma"))) double fma_chains256(std::int64_t iters) {
  DIT_FMA_CHAINS(__m256, 8, _mm256_fmadd_ps, _mm256_set1_ps)
}
#undef DIT_FMA_CHAINS

void BM_FmaPeak(benchmark::State& state) {
  const bool wide = __builtin_cpu_supports("avx512f") != 0;
  state.SetLabel(wide ? "512-bit FMA" : "256-bit FMA");
  constexpr std::int64_t kIters = 1 << 20;
  double flops = 0;
  for (auto _ : state) {
    double f = 0;
#pragma omp parallel reduction(+ : f)
    f += wide ? fma_chains512(kIters) : fma_chains256(kIters);
    flops += f;
  }
  state.counters["GFLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.counters["threads"] = omp_get_max_threads();
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

void kernel_shapes(benchmark::internal::Benchmark* b) {
  std::vector<dit::cpu::GemmKernel> kernels{dit::cpu::GemmKernel::Eigen};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) kernels.insert(kernels.begin(), dit::cpu::GemmKernel::Avx2);
  if (__builtin_cpu_supports("avx512f")) kernels.insert(kernels.begin(), dit::cpu::GemmKernel::Avx512);
  for (const auto kernel : kernels) {
    b->Args({1024, 1024, 1024, static_cast<std::int64_t>(kernel)});
    b->Args({8 * 64, 3 * 384, 384, static_cast<std::int64_t>(kernel)});
    b->Args({8 * 64, 1536, 384, static_cast<std::int64_t>(kernel)});
    b->Args({8 * 256, 768, 3072, static_cast<std::int64_t>(kernel)});
  }
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_FmaPeak)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_BackendGemm)->Apply(shapes);
BENCHMARK(BM_KernelGemm)->Apply(kernel_shapes);
#ifdef DIT_BENCH_CBLAS
BENCHMARK(BM_OpenBlasSgemm)->Apply(shapes);
#endif
BENCHMARK_MAIN();

// CUDA backend GEMM through cuBLASLt. backend.h is row-major, cuBLASLt column-major: a row-major
// (r x c) matrix is the column-major (c x r) one, so C = op(A) op(B) is computed as
// C^T = op(B)^T op(A)^T with cuBLASLt's A = our B and B = our A, no data moved. fp32 accumulation
// (CUBLAS_COMPUTE_32F; fp32 GEMMs use TF32 tensor cores only when asked with DIT_TF32=1); 3-D
// views are one strided-batched call.
// gemm_bias adds a linear layer's bias in cuBLASLt's epilogue (CUBLASLT_EPILOGUE_BIAS: one value
// per row of the column-major D, which is one per column of our row-major C, as add_rowwise).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <limits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemm.cuh"

namespace dit {

namespace cuda {

namespace {

constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;  // cuBLAS's advice for Hopper

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
    default: break;
  }
  DIT_FAIL("gemm: needs float tensors, got ", dtype_name(t));
}

// fp32 accumulation always; fp32 inputs through TF32 tensor cores only when the user asked.
cublasComputeType_t compute_type(const GemmContext& ctx, cudaDataType_t type) {
  return ctx.tf32 && type == CUDA_R_32F ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

// Largest power of two (<= 256) dividing the address and, for a batch, the batch stride: the
// heuristic may only pick kernels whose alignment needs every matrix of the batch meets.
std::int64_t alignment(const void* p, std::int64_t stride_bytes) {
  std::uint64_t v = reinterpret_cast<std::uintptr_t>(p) | 256u;
  if (stride_bytes > 0) v |= static_cast<std::uint64_t>(stride_bytes);
  return static_cast<std::int64_t>(v & (~v + 1));
}

// The problem in row-major terms, as backend.h states it.
struct GemmDims {
  std::int64_t m, n, k, batch, ar, ac, br, bc;
  Transpose ta, tb;
};

template <typename T>
void set_attr(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, T v) {
  DIT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, a, &v, sizeof v));
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, std::int64_t rows, std::int64_t cols,
                                   std::int64_t batch) {
  cublasLtMatrixLayout_t l = nullptr;
  DIT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, static_cast<std::uint64_t>(rows),
                                              static_cast<std::uint64_t>(cols), rows));
  if (batch > 1) {
    set_attr(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, static_cast<std::int32_t>(batch));
    set_attr(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, rows * cols);
  }
  return l;
}

// Descriptors and the heuristic's first choice for one key. Column-major view: cuBLASLt's A is
// our B stored (bc x br), its B is our A stored (ac x ar), and C is (n x m).
// A and B share one dtype; C is that dtype or fp32 (16-bit inputs accumulating into fp32 grads).
struct GemmTypes {
  cudaDataType_t ab, c;
};

GemmPlan make_plan(GemmContext& ctx, const GemmDims& g, GemmTypes type,
                   const std::int64_t align[3], const void* bias) {
  GemmPlan p;
  DIT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, compute_type(ctx, type.ab), CUDA_R_32F));
  if (bias) {  // the bias has D's dtype (the default); its pointer is set again before each call
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    DIT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                    sizeof epilogue));
    // The heuristic reads the pointer's alignment; later calls share this plan only with biases of
    // the same alignment (it is part of the plan's key).
    DIT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                    sizeof bias));
  }
  const cublasOperation_t op_a = g.tb == Transpose::Yes ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.ta == Transpose::Yes ? CUBLAS_OP_T : CUBLAS_OP_N;
  DIT_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
  DIT_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
  p.a = make_layout(type.ab, g.bc, g.br, g.batch);
  p.b = make_layout(type.ab, g.ac, g.ar, g.batch);
  p.c = make_layout(type.c, g.n, g.m, g.batch);

  cublasLtMatmulPreference_t pref = nullptr;
  DIT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const std::uint64_t ws = ctx.workspace_bytes;
  DIT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  const std::uint32_t al_a = static_cast<std::uint32_t>(align[1]),  // our B is cuBLASLt's A
      al_b = static_cast<std::uint32_t>(align[0]), al_c = static_cast<std::uint32_t>(align[2]);
  const std::pair<cublasLtMatmulPreferenceAttributes_t, std::uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, al_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, al_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, al_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, al_c}};
  for (const auto& [attr, value] : aligns)
    DIT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof value));

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t rc = cublasLtMatmulAlgoGetHeuristic(ctx.lt, p.op, p.a, p.b, p.c, p.c, pref,
                                                           1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  // NOT_SUPPORTED means "no kernel for this problem": the cuBLAS fallback takes it.
  if (rc != CUBLAS_STATUS_NOT_SUPPORTED) DIT_CUBLAS_CHECK(rc);
  if (rc == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS &&
      result.workspaceSize <= ctx.workspace_bytes) {
    p.algo = result.algo;
    p.has_algo = true;
  }
  return p;
}

void destroy_plan(GemmPlan& p) {
  if (p.a) cublasLtMatrixLayoutDestroy(p.a);
  if (p.b) cublasLtMatrixLayoutDestroy(p.b);
  if (p.c) cublasLtMatrixLayoutDestroy(p.c);
  if (p.op) cublasLtMatmulDescDestroy(p.op);
}

// The same product through cublasGemmStridedBatchedEx, for problems cuBLASLt has no kernel for.
void gemm_fallback(GemmContext& ctx, const GemmDims& g, GemmTypes type, const void* a,
                   const void* b, void* c, float alpha, float beta) {
  constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();
  DIT_CHECK(std::max({g.m, g.n, g.k, g.batch, g.ac, g.bc}) <= kIntMax,
            "gemm: dimensions beyond the int range of the cuBLAS fallback");
  DIT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      ctx.blas, g.tb == Transpose::Yes ? CUBLAS_OP_T : CUBLAS_OP_N,
      g.ta == Transpose::Yes ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(g.n),
      static_cast<int>(g.m), static_cast<int>(g.k), &alpha, b, type.ab, static_cast<int>(g.bc),
      g.br * g.bc, a, type.ab, static_cast<int>(g.ac), g.ar * g.ac, &beta, c, type.c,
      static_cast<int>(g.n), g.m * g.n, static_cast<int>(g.batch), compute_type(ctx, type.ab),
      CUBLAS_GEMM_DEFAULT));
}

// The cached plan for a product, made on first use.
const GemmPlan& plan_for(GemmContext& ctx, const GemmDims& g, DType ab, DType c, bool accumulate,
                         const std::int64_t align[3], const void* bias) {
  const std::int64_t bias_align = bias ? alignment(bias, 0) : 0;
  const std::int64_t dtypes = static_cast<std::int64_t>(ab) * 16 + static_cast<std::int64_t>(c);
  const std::array<std::int64_t, 12> key = {
      g.m, g.n, g.k, g.batch, static_cast<std::int64_t>(g.ta), static_cast<std::int64_t>(g.tb),
      dtypes, accumulate, align[0], align[1], align[2], bias_align};
  auto it = ctx.plans.find(key);
  if (it == ctx.plans.end())
    it = ctx.plans.emplace(key, make_plan(ctx, g, {cuda_type(ab), cuda_type(c)}, align, bias)).first;
  return it->second;
}

}  // namespace

GemmContext::GemmContext(cudaStream_t s) : stream(s) {
  const char* tf = std::getenv("DIT_TF32");
  tf32 = tf && std::string(tf) == "1";
  DIT_CUBLAS_CHECK(cublasLtCreate(&lt));
  DIT_CUBLAS_CHECK(cublasCreate(&blas));
  DIT_CUBLAS_CHECK(cublasSetStream(blas, s));
  // Default math: with CUBLAS_COMPUTE_32F fp32 inputs stay in fp32 (no TF32).
  DIT_CUBLAS_CHECK(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH));
  DIT_CUDA_CHECK(cudaMalloc(&workspace, kWorkspaceBytes));
  workspace_bytes = kWorkspaceBytes;
  // One stream, so cuBLASLt and the cuBLAS fallback can share the workspace.
  DIT_CUBLAS_CHECK(cublasSetWorkspace(blas, workspace, workspace_bytes));
}

GemmContext::~GemmContext() {
  for (auto& [key, plan] : plans) destroy_plan(plan);
  if (blas) cublasDestroy(blas);
  if (lt) cublasLtDestroy(lt);
  if (workspace) cudaFree(workspace);
}

}  // namespace cuda

void CudaBackend::gemm(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb,
                       const Tensor& c, Accumulate acc, float alpha) {
  const GemmShape s = gemm_shape(a, ta, b, tb, c);
  const std::int64_t batch = s.batch;
  const cuda::GemmDims g{s.m, s.n, s.k, s.batch, s.ar, s.ac, s.br, s.bc, ta, tb};
  cuda::check_on_device(a, "gemm A");
  cuda::check_on_device(b, "gemm B");
  cuda::check_on_device(c, "gemm C");
  cuda::same_dtype(a, b, "gemm A and B");
  DIT_CHECK(c.dtype == a.dtype || c.dtype == DType::F32, "gemm: C in ", dtype_name(c.dtype),
            " for inputs in ", dtype_name(a.dtype), " (C takes the inputs' dtype or fp32)");
  const cuda::GemmTypes type{cuda::cuda_type(a.dtype), cuda::cuda_type(c.dtype)};
  if (g.m == 0 || g.n == 0 || batch == 0) return;
  if (g.k == 0) {  // an empty sum: C = 0 (+ C)
    if (acc == Accumulate::Overwrite) fill(c, 0.f);
    return;
  }
  const float beta = acc == Accumulate::Add ? 1.f : 0.f;
  const std::int64_t esz = static_cast<std::int64_t>(dtype_size(a.dtype));
  const std::int64_t csz = static_cast<std::int64_t>(dtype_size(c.dtype));
  const std::int64_t align[3] = {
      cuda::alignment(a.data, batch > 1 ? g.ar * g.ac * esz : 0),
      cuda::alignment(b.data, batch > 1 ? g.br * g.bc * esz : 0),
      cuda::alignment(c.data, batch > 1 ? g.m * g.n * csz : 0)};
  const cuda::GemmPlan& p =
      cuda::plan_for(*gemm_, g, a.dtype, c.dtype, acc == Accumulate::Add, align, nullptr);
  if (!p.has_algo) {
    cuda::gemm_fallback(*gemm_, g, type, a.data, b.data, c.data, alpha, beta);
    return;
  }
  DIT_CUBLAS_CHECK(cublasLtMatmul(gemm_->lt, p.op, &alpha, b.data, p.a, a.data, p.b, &beta, c.data,
                                  p.c, c.data, p.c, &p.algo, gemm_->workspace,
                                  gemm_->workspace_bytes, stream_));
}

void CudaBackend::gemm_bias(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb,
                            const Tensor& bias, const Tensor& c) {
  const GemmShape s = gemm_shape(a, ta, b, tb, c);
  DIT_CHECK(s.batch == 1 && c.shape.rank == 2 && bias.numel() == s.n, "gemm_bias: a bias of ",
            bias.numel(), " values for C", c.shape.str(), " (2-D, one value per column)");
  cuda::check_on_device(bias, "gemm_bias bias");
  cuda::same_dtype(bias, c, "gemm_bias bias and C");
  // The epilogue reads the bias as vectors: below 16-byte alignment, or for an empty sum, the
  // product and the bias go separately.
  const std::int64_t bias_align = cuda::alignment(bias.data, 0);
  if (s.k == 0 || s.m == 0 || bias_align < 16) return Backend::gemm_bias(a, ta, b, tb, bias, c);
  cuda::check_on_device(a, "gemm A");
  cuda::check_on_device(b, "gemm B");
  cuda::check_on_device(c, "gemm C");
  cuda::same_dtype(a, c, "gemm A and C");
  cuda::same_dtype(b, c, "gemm B and C");
  const cuda::GemmDims g{s.m, s.n, s.k, 1, s.ar, s.ac, s.br, s.bc, ta, tb};
  const std::int64_t align[3] = {cuda::alignment(a.data, 0), cuda::alignment(b.data, 0),
                                 cuda::alignment(c.data, 0)};
  const cuda::GemmPlan& p = cuda::plan_for(*gemm_, g, c.dtype, c.dtype, false, align, bias.data);
  if (!p.has_algo) return Backend::gemm_bias(a, ta, b, tb, bias, c);
  const void* bias_ptr = bias.data;
  DIT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr,
                                                  sizeof bias_ptr));
  const float alpha = 1.f, beta = 0.f;
  DIT_CUBLAS_CHECK(cublasLtMatmul(gemm_->lt, p.op, &alpha, b.data, p.a, a.data, p.b, &beta, c.data,
                                  p.c, c.data, p.c, &p.algo, gemm_->workspace,
                                  gemm_->workspace_bytes, stream_));
}

}  // namespace dit

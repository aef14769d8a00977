// cuBLAS and cuBLASLt, opened the first time the CUDA backend calls them. Linking them would load
// both (hundreds of MB of code and relocations) at every start of dit_mp, about 0.65 s per rank
// even on the CPU backend; cuDNN and NCCL already load their GPU parts lazily. Each function the
// backend uses is defined here under its own name (so every call site reads as cuBLAS's API) and
// forwards to the library's symbol, resolved once. A library or symbol that cannot be found is one
// error naming it.
#include <dlfcn.h>

#include <cublasLt.h>
#include <cublas_v2.h>

#include <string>

#include "core/error.h"

#define DIT_CUBLAS_STR(x) #x
#define DIT_CUBLAS_XSTR(x) DIT_CUBLAS_STR(x)

namespace dit {
namespace {

void* open_library(const char* soname) {
  void* lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    DIT_FAIL("the CUDA backend needs ", soname, " (CUDA's cuBLAS ", CUBLAS_VER_MAJOR,
             ".x), which could not be loaded: ", why ? why : "not found", "; put its folder on LD_LIBRARY_PATH");
  }
  return lib;
}

void* cublas_library() {
  static void* lib = open_library("libcublas.so." DIT_CUBLAS_XSTR(CUBLAS_VER_MAJOR));
  return lib;
}

void* cublaslt_library() {
  static void* lib = open_library("libcublasLt.so." DIT_CUBLAS_XSTR(CUBLAS_VER_MAJOR));
  return lib;
}

template <class Fn>
Fn* resolve(void* lib, const char* name) {
  void* f = dlsym(lib, name);
  if (f == nullptr) DIT_FAIL("the cuBLAS library loaded has no ", name, " (a cuBLAS older than ", CUBLAS_VER_MAJOR, ".x?)");
  return reinterpret_cast<Fn*>(f);
}

}  // namespace
}  // namespace dit

// One forwarding definition: the function's name as the headers spell it (their macros may map it
// to a versioned symbol, e.g. cublasCreate -> cublasCreate_v2), its library, result and parameters.
#define DIT_CUBLAS_FORWARD(library, result, name, params, args)                                    \
  extern "C" result name params {                                                                  \
    using Fn = result params;                                                                      \
    static Fn* const fn = dit::resolve<Fn>(dit::library(), DIT_CUBLAS_XSTR(name));                 \
    return fn args;                                                                                \
  }

DIT_CUBLAS_FORWARD(cublas_library, cublasStatus_t, cublasCreate, (cublasHandle_t * handle), (handle))
DIT_CUBLAS_FORWARD(cublas_library, cublasStatus_t, cublasDestroy, (cublasHandle_t handle), (handle))
DIT_CUBLAS_FORWARD(cublas_library, cublasStatus_t, cublasSetStream, (cublasHandle_t handle, cudaStream_t stream),
                   (handle, stream))
DIT_CUBLAS_FORWARD(cublas_library, cublasStatus_t, cublasSetMathMode, (cublasHandle_t handle, cublasMath_t mode),
                   (handle, mode))
DIT_CUBLAS_FORWARD(cublas_library, cublasStatus_t, cublasSetWorkspace,
                   (cublasHandle_t handle, void* workspace, size_t bytes), (handle, workspace, bytes))
DIT_CUBLAS_FORWARD(cublas_library, const char*, cublasGetStatusString, (cublasStatus_t status), (status))
DIT_CUBLAS_FORWARD(cublas_library, cublasStatus_t, cublasGemmStridedBatchedEx,
                   (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                    const void* alpha, const void* A, cudaDataType Atype, int lda, long long int strideA,
                    const void* B, cudaDataType Btype, int ldb, long long int strideB, const void* beta, void* C,
                    cudaDataType Ctype, int ldc, long long int strideC, int batchCount,
                    cublasComputeType_t computeType, cublasGemmAlgo_t algo),
                   (handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C,
                    Ctype, ldc, strideC, batchCount, computeType, algo))

DIT_CUBLAS_FORWARD(cublaslt_library, cublasStatus_t, cublasLtCreate, (cublasLtHandle_t * handle), (handle))
DIT_CUBLAS_FORWARD(cublaslt_library, cublasStatus_t, cublasLtDestroy, (cublasLtHandle_t handle), (handle))
DIT_CUBLAS_FORWARD(cublaslt_library, size_t, cublasLtGetVersion, (void), ())
DIT_CUBLAS_FORWARD(cublaslt_library, cublasStatus_t, cublasLtMatmulDescCreate,
                   (cublasLtMatmulDesc_t * desc, cublasComputeType_t compute, cudaDataType_t scale),
                   (desc, compute, scale))
DIT_CUBLAS_FORWARD(cublaslt_library, cublasStatus_t, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t desc), (desc))
DIT_CUBLAS_FORWARD(cublaslt_library, cublasStatus_t, cublasLtMatmulDescSetAttribute,
                   (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* buf, size_t bytes),
                   (desc, attr, buf, bytes))
DIT_CUBLAS_FORWARD(cublaslt_library, cublasStatus_t, cublasLtMatrixLayoutCreate,
                   (cublasLtMatrixLayout_t * layout, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld),
                   (layout, type, rows, cols, ld))
DIT_CUBLAS_FORWARD(cublaslt_library, cublasStatus_t, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t layout),
                   (layout))
DIT_CUBLAS_FORWARD(cublaslt_library, cublasStatus_t, cublasLtMatrixLayoutSetAttribute,
                   (cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr, const void* buf, size_t bytes),
                   (layout, attr, buf, bytes))
DIT_CUBLAS_FORWARD(cublaslt_library, cublasStatus_t, cublasLtMatmulPreferenceCreate,
                   (cublasLtMatmulPreference_t * pref), (pref))
DIT_CUBLAS_FORWARD(cublaslt_library, cublasStatus_t, cublasLtMatmulPreferenceDestroy,
                   (cublasLtMatmulPreference_t pref), (pref))
DIT_CUBLAS_FORWARD(cublaslt_library, cublasStatus_t, cublasLtMatmulPreferenceSetAttribute,
                   (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                    size_t bytes),
                   (pref, attr, buf, bytes))
DIT_CUBLAS_FORWARD(cublaslt_library, cublasStatus_t, cublasLtMatmulAlgoGetHeuristic,
                   (cublasLtHandle_t handle, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                    cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref, int requested,
                    cublasLtMatmulHeuristicResult_t results[], int* returned),
                   (handle, op, a, b, c, d, pref, requested, results, returned))
DIT_CUBLAS_FORWARD(cublaslt_library, cublasStatus_t, cublasLtMatmul,
                   (cublasLtHandle_t handle, cublasLtMatmulDesc_t op, const void* alpha, const void* A,
                    cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                    const void* C, cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                    const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspaceBytes, cudaStream_t stream),
                   (handle, op, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace, workspaceBytes,
                    stream))

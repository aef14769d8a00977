// The CUDA backend's cuDNN path for fused attention: cuDNN's unified SDPA forward and backward
// operations, built through the graph (backend) C API once per problem and run on the backend's
// stream. Under the auto path a problem cuDNN cannot serve — any failure while building or
// finalizing the graph or a plan, or running it, a cuDNN older than the build needs, a problem
// outside its limits — falls back to the composed attention (backend/composed_attention.h),
// decided once per problem and said once on stderr with cuDNN's message and version
// (backend/attention_path.h). This header needs no cuDNN or CUDA header.
//
// Layout, as backend.h states it: qkv (N, T, 3*H*E) rows [q | k | v], heads contiguous inside
// each, so Q as a (b=N, h=H, s=T, d=E) tensor has strides (T*3HE, E, 3HE, 1) and K, V the same
// at element offsets HE and 2HE; out (N, T, H*E) is (N, H, T, E) with strides (T*HE, E, HE, 1).
// lse (N, H, T) fp32 is the natural-log logsumexp of each row of the SCALED scores,
// lse_i = log sum_j exp(q_i . k_j / sqrt(E)). cuDNN's Stats tensor (b, h, s, 1) holds exactly
// this (natural log, not log2), so forward and backward may each take either path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>

#include "backend/attention_path.h"
#include "core/dtype.h"

typedef struct CUstream_st* cudaStream_t;
struct cudnnContext;
typedef struct cudnnContext* cudnnHandle_t;

namespace dit::cuda {

enum class AttnDir : std::uint8_t { Forward, Backward };

// One attention problem: qkv (n, t, 3*h*e) of dtype, in one direction.
struct SdpaProblem {
  std::int64_t n, t, h, e;
  DType dtype;
  AttnDir dir;
};

// Device pointers of one call. Forward reads qkv and writes out and lse; backward reads qkv,
// out, lse and dout and writes dqkv (dQ, dK, dV are strided views into it, like q, k, v).
struct SdpaPointers {
  void* qkv = nullptr;   // (N, T, 3*H*E)
  void* out = nullptr;   // (N, T, H*E)
  void* lse = nullptr;   // (N, H, T) fp32
  void* dout = nullptr;  // (N, T, H*E), backward only
  void* dqkv = nullptr;  // (N, T, 3*H*E), backward only
};

// How the message of a NoEngine failure starts (the heuristics offered nothing that plans).
inline constexpr std::string_view kNoEngine = "cuDNN has no engine";

struct SdpaPlan;  // the finalized execution plan of one problem and what it was built from

// Versions as numbers major * 10000 + minor * 100 + patch. The unified SDPA operations need
// cuDNN 9.17 or newer (the build checks its headers; this is checked against the loaded library).
inline constexpr int kCudnnNeeded = 91700;
int cudnn_loaded_version();  // cudnnGetVersion() of the loaded library, in that form
// "cuDNN 9.19.0"
std::string cudnn_version_string();

// DIT_CUDNN_FAIL=library|ineligible|graph|no engine|plan|execute: that stage fails as if cuDNN
// had failed there (ineligible: as if no problem were eligible), so a device check can watch the
// fallback (and DIT_ATTENTION=cudnn's refusal or error) happen. Unset or empty: no injection.
// Throws naming the values on anything else (parse_fused_failure).
std::optional<FusedFailure> injected_cudnn_failure(const char* value);

class CudnnAttention {
 public:
  // `stream` is the backend's only stream; nothing of cuDNN is touched until a plan is needed.
  CudnnAttention(cudaStream_t stream, AttentionPath path);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  AttentionPath path() const { return cache_.path(); }
  // Checks the loaded cuDNN's version and creates the handle ahead of the first plan, unless the
  // path does not use cuDNN. A failure becomes the reason every problem falls back (an error
  // under AttentionPath::Cudnn).
  void prepare();
  void set_path(AttentionPath path) { cache_.set_path(path); }
  // Deterministic engines only (train.deterministic; off by default): cuDNN's fastest SDPA
  // backward may use atomics, whose sums differ run to run. Plans made so far are dropped.
  void set_deterministic(bool d);

  // The plan for p with these pointers, built on first use and cached; nullptr when the call does
  // not go to cuDNN (fp32, the kernel or composed path, or a fallback). Under AttentionPath::Cudnn
  // a problem cuDNN cannot serve throws.
  const SdpaPlan* plan(const SdpaProblem& p, const SdpaPointers& ptrs);
  std::size_t workspace_bytes(const SdpaPlan& plan) const;
  // Enqueues the plan on the stream; `workspace` holds workspace_bytes(plan) device bytes. False
  // when cuDNN refused to run it: the call, and every later one of the problem, then falls back
  // (said once; an error under AttentionPath::Cudnn). `plan` is gone after a false.
  bool run(const SdpaPlan& plan, const SdpaPointers& ptrs, void* workspace);
  // The fallbacks so far, one line for a run's accounting ("" when none).
  std::string note() const { return log_.note(); }

 private:
  // n, t, h, e, dtype, direction, and whether every pointer is 16-byte aligned
  using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, DType, AttnDir,
                         bool>;
  cudnnHandle_t handle();     // created on first use, bound to the stream
  void try_prepare();         // prepare(), keeping a failure in library_error_ only
  std::string library_error_;  // why cuDNN cannot be used at all ("" if it can)

  cudaStream_t stream_;
  bool deterministic_ = false;
  std::optional<FusedFailure> inject_;  // DIT_CUDNN_FAIL
  cudnnHandle_t handle_ = nullptr;
  FallbackLog log_;
  FusedPlanCache<Key, SdpaPlan> cache_;
};

}  // namespace dit::cuda

// The CUDA backend's cuDNN path for fused attention: cuDNN's unified SDPA forward and backward
// operations, built through the graph (backend) C API once per problem and run on the backend's
// stream. A problem cuDNN cannot take falls back to the plain kernels of attention.cu, decided
// once per problem and said once on stderr. This header needs no cuDNN or CUDA header.
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
#include <memory>
#include <string>
#include <string_view>
#include <tuple>

#include "core/dtype.h"

typedef struct CUstream_st* cudaStream_t;
struct cudnnContext;
typedef struct cudnnContext* cudnnHandle_t;

namespace dit::cuda {

// Which implementation attention_fwd/bwd use in bf16 and fp16 (fp32 always takes the plain
// kernels: cuDNN's SDPA has no fp32, and then cuDNN is never touched). The default comes from
// the environment:
// DIT_ATTENTION=auto (or unset): cuDNN where it can, else the plain kernels (one line on stderr
//   per problem saying why: E not a multiple of 8 up to 128, a misaligned pointer, no engine, ...);
// DIT_ATTENTION=kernel: always the plain kernels, cuDNN is never touched;
// DIT_ATTENTION=cudnn: always cuDNN; a problem it cannot take is an error, not a fallback.
enum class AttentionPath { Auto, Kernel, Cudnn };

// "auto" | "kernel" | "cudnn" (nullptr or "" is auto); throws naming the allowed values.
AttentionPath parse_attention_path(const char* value);
AttentionPath attention_path_from_env();  // DIT_ATTENTION

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

// What an error message says when cuDNN has no engine for a problem (as opposed to a failed
// call), so that a test forcing the cuDNN path can tell "not offered on this GPU" from a bug.
inline constexpr std::string_view kNoEngine = "cuDNN has no engine";

struct SdpaPlan;  // the finalized execution plan of one problem and what it was built from

class CudnnAttention {
 public:
  // `stream` is the backend's only stream; nothing of cuDNN is touched until a plan is needed.
  CudnnAttention(cudaStream_t stream, AttentionPath path);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  AttentionPath path() const { return path_; }
  // Creates the cuDNN handle ahead of the first plan, unless the path is Kernel. A failure is kept
  // as the reason every problem then takes the kernels (an error under AttentionPath::Cudnn).
  void prepare();
  void set_path(AttentionPath path) { path_ = path; }
  // Deterministic engines only (train.deterministic): cuDNN's fastest SDPA backward may use
  // atomics, whose sums differ run to run. Plans made so far are dropped.
  void set_deterministic(bool d);

  // The plan for p with these pointers, built on first use and cached; nullptr when the call
  // takes the plain kernels. Under AttentionPath::Cudnn a problem cuDNN cannot take throws.
  const SdpaPlan* plan(const SdpaProblem& p, const SdpaPointers& ptrs);
  std::size_t workspace_bytes(const SdpaPlan& plan) const;
  // Enqueues the plan on the stream; `workspace` holds workspace_bytes(plan) device bytes.
  void run(const SdpaPlan& plan, const SdpaPointers& ptrs, void* workspace);

 private:
  // n, t, h, e, dtype, direction, and whether every pointer is 16-byte aligned
  using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, DType, AttnDir,
                         bool>;
  struct Entry {
    std::unique_ptr<SdpaPlan> plan;  // null: this problem takes the plain kernels
    std::string why;                 // the reason when it does
    bool reported = false;           // said on stderr (once, and only under Auto)
  };
  cudnnHandle_t handle();  // created on first use, bound to the stream
  std::string handle_error_;  // why prepare() could not create the handle ("" if it could)

  cudaStream_t stream_;
  AttentionPath path_;
  bool deterministic_ = false;
  cudnnHandle_t handle_ = nullptr;
  std::map<Key, Entry> entries_;
};

}  // namespace dit::cuda

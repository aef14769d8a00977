// cuDNN fused attention through the graph (backend) C API. Per problem: tensor descriptors for
// the strided q/k/v/out views of the fused buffers, one unified SDPA operation (forward with
// Stats, or backward), an operation graph, and the heuristics' engine configs tried best first
// until one finalizes into an execution plan, which is kept for every later call. Under
// train.deterministic only deterministic engines are taken (a run then repeats bit for bit);
// otherwise the heuristics' best, which for the backward may sum with atomics. Each stage throws a FusedError naming itself, so the auto path can fall back (attention_path.h).
#include "backend/cuda/cudnn_attention.h"

#include <cudnn_graph.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_check.h"

namespace dit::cuda {

namespace {

using i64 = std::int64_t;
using Dims = std::array<i64, 4>;

// Tensor uids of a graph (unique within it; the variant pack binds pointers by them).
enum Uid : i64 { kQ = 1, kK, kV, kO, kStats, kScale, kDO, kDQ, kDK, kDV };

// Every pointer and stride in bytes is a multiple of this: E % 8 == 0 makes the row strides
// (3HE and HE elements) and the K, V offsets (HE, 2HE) multiples of 16 bytes in bf16/fp16.
constexpr i64 kAlign = 16;
constexpr i64 kMaxHeadDim = 128;
constexpr i64 kMaxWorkspace = i64{1} << 30;  // an engine asking for more is passed over

// Owns one backend descriptor; destroyed when it goes.
class Desc {
 public:
  Desc() = default;
  explicit Desc(cudnnBackendDescriptorType_t type) {
    DIT_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_));
  }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Desc& operator=(Desc&& o) noexcept {
    std::swap(d_, o.d_);
    return *this;
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  // cudnnBackendSetAttribute, checked; `what` names the attribute in the error message.
  void set(cudnnBackendAttributeName_t name, const char* what, cudnnBackendAttributeType_t type,
           i64 count, const void* values) {
    const cudnnStatus_t rc = cudnnBackendSetAttribute(d_, name, type, count, values);
    if (rc != CUDNN_STATUS_SUCCESS)
      detail::throw_cudnn_error(__FILE__, __LINE__,
                                detail::concat("cudnnBackendSetAttribute(", what, ")").c_str(), rc);
  }
  // One descriptor-valued attribute (an operation's tensor, a graph's operation, ...).
  void set_desc(cudnnBackendAttributeName_t name, const char* what, cudnnBackendDescriptor_t v) {
    set(name, what, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
  }
  void finalize() { DIT_CUDNN_CHECK(cudnnBackendFinalize(d_)); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

#define DIT_SET(desc, attr, type, count, values) (desc).set(attr, #attr, type, count, values)
#define DIT_SET_DESC(desc, attr, value) (desc).set_desc(attr, #attr, value)

// A finalized tensor descriptor: 4-D, 16-byte aligned, not virtual; by_value for the host
// scalar of the attention scale.
Desc make_tensor(Uid uid, cudnnDataType_t type, const Dims& dims, const Dims& strides,
                 bool by_value = false) {
  Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const i64 id = uid, align = kAlign;
  const bool is_virtual = false;
  DIT_SET(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  DIT_SET(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
  DIT_SET(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
  DIT_SET(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id);
  DIT_SET(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
  DIT_SET(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
  if (by_value) DIT_SET(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
  t.finalize();
  return t;
}

// The views of one problem as cuDNN's (b, h, s, d) tensors (see the header).
struct Geometry {
  Dims heads;        // (N, H, T, E): q, k, v, out and their gradients
  Dims qkv_strides;  // (T*3HE, E, 3HE, 1): q, k, v in the fused qkv (and dq, dk, dv in dqkv)
  Dims out_strides;  // (T*HE, E, HE, 1): out and dout
  Dims stats;        // (N, H, T, 1): lse
  Dims stats_strides;
};
Geometry geometry(const SdpaProblem& p) {
  const i64 he = p.h * p.e;
  return Geometry{{p.n, p.h, p.t, p.e},
                  {p.t * 3 * he, p.e, 3 * he, 1},
                  {p.t * he, p.e, he, 1},
                  {p.n, p.h, p.t, 1},
                  {p.h * p.t, p.t, 1, 1}};
}

std::string describe(const SdpaProblem& p) {
  return detail::concat(dtype_name(p.dtype), " attention ",
                        p.dir == AttnDir::Forward ? "forward" : "backward", " N=", p.n, " T=", p.t,
                        " H=", p.h, " E=", p.e);
}

// Why p cannot go to cuDNN at all (empty when it can be tried).
std::string ineligible(const SdpaProblem& p, bool aligned) {
  if (p.dtype != DType::BF16 && p.dtype != DType::F16)
    return detail::concat("cuDNN's SDPA computes in bf16 or fp16, not ", dtype_name(p.dtype));
  if (p.e % 8 != 0 || p.e > kMaxHeadDim)
    return detail::concat("head dim E = ", p.e, " is not a multiple of 8 up to ", kMaxHeadDim);
  if (p.t < 2)  // one token: softmax over one key is 1; cuDNN's SDPA needs two or more
    return "cuDNN's SDPA needs more than one token";
  if (!aligned) return "a tensor is not 16-byte aligned";
  return {};
}

}  // namespace

// An execution plan and every descriptor it was built from (kept alive with it, destroyed after
// it, in reverse order of creation).
struct SdpaPlan {
  SdpaProblem problem{};
  float scale = 1.f;  // the by-value attention scale: cuDNN reads it from here at each launch
  std::vector<Desc> parts;
  Desc exec;
  std::int64_t workspace = 0;

  ~SdpaPlan() {
    exec = Desc();
    while (!parts.empty()) parts.pop_back();
  }
};

namespace {

// Tensors and the unified SDPA operation of p, the parts kept in `plan`; returns the operation.
cudnnBackendDescriptor_t make_operation(SdpaPlan& plan) {
  const SdpaProblem& p = plan.problem;
  const Geometry g = geometry(p);
  const cudnnDataType_t type = p.dtype == DType::BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  auto keep = [&](Desc d) {
    plan.parts.push_back(std::move(d));
    return plan.parts.back().get();
  };
  const auto qkv = [&](Uid uid) { return keep(make_tensor(uid, type, g.heads, g.qkv_strides)); };
  const auto outs = [&](Uid uid) { return keep(make_tensor(uid, type, g.heads, g.out_strides)); };
  const cudnnBackendDescriptor_t q = qkv(kQ), k = qkv(kK), v = qkv(kV), o = outs(kO);
  const cudnnBackendDescriptor_t stats =
      keep(make_tensor(kStats, CUDNN_DATA_FLOAT, g.stats, g.stats_strides));
  const cudnnBackendDescriptor_t scale =
      keep(make_tensor(kScale, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, true));

  if (p.dir == AttnDir::Forward) {
    Desc op(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR);
    DIT_SET_DESC(op, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, q);
    DIT_SET_DESC(op, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, k);
    DIT_SET_DESC(op, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, v);
    DIT_SET_DESC(op, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, o);
    DIT_SET_DESC(op, CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, stats);  // training: emit lse
    DIT_SET_DESC(op, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, scale);
    op.finalize();
    return keep(std::move(op));
  }
  const cudnnBackendDescriptor_t dout = outs(kDO), dq = qkv(kDQ), dk = qkv(kDK), dv = qkv(kDV);
  Desc op(CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR);
  DIT_SET_DESC(op, CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC, q);
  DIT_SET_DESC(op, CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC, k);
  DIT_SET_DESC(op, CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC, v);
  DIT_SET_DESC(op, CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC, o);
  DIT_SET_DESC(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC, dout);
  DIT_SET_DESC(op, CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC, stats);
  DIT_SET_DESC(op, CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC, scale);
  DIT_SET_DESC(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC, dq);
  DIT_SET_DESC(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC, dk);
  DIT_SET_DESC(op, CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC, dv);
  op.finalize();
  return keep(std::move(op));
}

// The engine configs heuristics `mode` offers for a finalized graph, best first (none when the
// mode declines the graph; *why says so).
std::vector<Desc> engine_configs(cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode,
                                 std::string& why) {
  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  DIT_SET_DESC(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  DIT_SET(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  const cudnnStatus_t rc = cudnnBackendFinalize(heur.get());  // checked: a mode may decline
  if (rc != CUDNN_STATUS_SUCCESS) {
    why += detail::concat(" heuristics mode ", static_cast<int>(mode), ": ",
                          cudnnGetErrorString(rc), ";");
    return {};
  }
  i64 count = 0;
  DIT_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                           CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
  std::vector<Desc> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (i64 i = 0; i < count; ++i) {
    cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(cfgs.back().get());
  }
  if (count <= 0) return cfgs;
  i64 got = 0;
  DIT_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                           CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                           raw.data()));
  cfgs.resize(static_cast<std::size_t>(std::clamp<i64>(got, 0, count)));
  return cfgs;
}

// Whether the engine of a config carries CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC (atomics: results
// that differ run to run).
bool nondeterministic(const Desc& cfg) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t e = engine.get();
  i64 count = 0;
  DIT_CUDNN_CHECK(cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                                           CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count, &e));
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  DIT_CUDNN_CHECK(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                           CUDNN_TYPE_NUMERICAL_NOTE,
                                           CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &count, notes));
  count = std::clamp<i64>(count, 0, CUDNN_NUMERICAL_NOTE_TYPE_COUNT);
  return std::find(notes, notes + count, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) != notes + count;
}

// Runs one stage of building or running a plan: a dit::Error inside (a failed cuDNN call
// included) becomes a FusedError of that stage; an injected failure (DIT_CUDNN_FAIL) fires first.
template <typename Fn>
auto stage(FusedFailure kind, const std::optional<FusedFailure>& inject, Fn&& fn) {
  if (inject && *inject == kind)
    throw FusedError(kind, detail::concat("injected by DIT_CUDNN_FAIL=", fused_failure_name(kind)));
  try {
    return fn();
  } catch (const FusedError&) {
    throw;
  } catch (const Error& e) {
    throw FusedError(kind, e.what());
  }
}

// The operation and its finalized graph; the parts kept in `plan`. Returns the graph.
cudnnBackendDescriptor_t make_graph(cudnnHandle_t handle, SdpaPlan& plan) {
  const cudnnBackendDescriptor_t op = make_operation(plan);
  Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  DIT_SET(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op);
  DIT_SET(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  graph.finalize();
  const cudnnBackendDescriptor_t g = graph.get();
  plan.parts.push_back(std::move(graph));
  return g;
}

// What the search over engine configs met, for the message when none could be planned.
struct PlanSearch {
  std::size_t offered = 0;
  int nondeterministic = 0, declined = 0, failed = 0, too_big = 0;
  std::string why;
};

// The execution plan of one config, or an empty Desc when it declines (NOT_SUPPORTED), fails to
// finalize or wants too much workspace (counted in `search`).
Desc try_config(cudnnHandle_t handle, const Desc& cfg, PlanSearch& search, i64* workspace) {
  Desc exec(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  const cudnnBackendDescriptor_t c = cfg.get();
  DIT_SET(exec, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  DIT_SET(exec, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
  const cudnnStatus_t rc = cudnnBackendFinalize(exec.get());  // checked: configs may decline
  if (rc != CUDNN_STATUS_SUCCESS) {
    const bool declined = CUDNN_STATUS_CATEGORY(rc) == CUDNN_STATUS_NOT_SUPPORTED;
    char detail[256] = {};
    cudnnGetLastErrorString(detail, sizeof detail);
    if (search.declined + search.failed == 0)
      search.why += detail::concat(" first plan failure: ", cudnnGetErrorString(rc), " (",
                                   static_cast<int>(rc), ") ", detail, ";");
    ++(declined ? search.declined : search.failed);
    return Desc();
  }
  i64 count = 0;
  DIT_CUDNN_CHECK(cudnnBackendGetAttribute(exec.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                           CUDNN_TYPE_INT64, 1, &count, workspace));
  if (*workspace < 0 || *workspace > kMaxWorkspace) {
    ++search.too_big;
    return Desc();
  }
  return exec;
}

// Operation, graph, heuristics, and the first engine config (deterministic ones only when asked)
// that finalizes into an execution plan. Throws a FusedError of the stage that failed: Graph for
// the operation and graph, NoEngine when no config could be planned (Plan when some config failed
// with an error rather than declining).
std::unique_ptr<SdpaPlan> build_plan(cudnnHandle_t handle, const SdpaProblem& p, bool deterministic,
                                     const std::optional<FusedFailure>& inject) {
  auto plan = std::make_unique<SdpaPlan>();
  plan->problem = p;
  plan->scale = 1.f / std::sqrt(static_cast<float>(p.e));  // as the composed attention
  const cudnnBackendDescriptor_t g =
      stage(FusedFailure::Graph, inject, [&] { return make_graph(handle, *plan); });
  PlanSearch search;
  // Heuristics mode A ranks the engines for this GPU; the fallback list is the second chance.
  const bool found = stage(FusedFailure::NoEngine, inject, [&] {
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      std::vector<Desc> cfgs = engine_configs(g, mode, search.why);
      search.offered += cfgs.size();
      for (Desc& cfg : cfgs) {
        if (deterministic && nondeterministic(cfg)) {
          ++search.nondeterministic;
          continue;
        }
        i64 workspace = 0;
        Desc exec = stage(FusedFailure::Plan, inject,
                          [&] { return try_config(handle, cfg, search, &workspace); });
        if (!exec.get()) continue;
        plan->parts.push_back(std::move(cfg));
        plan->exec = std::move(exec);
        plan->workspace = workspace;
        return true;
      }
    }
    return false;
  });
  if (found) return plan;
  throw FusedError(search.failed > 0 ? FusedFailure::Plan : FusedFailure::NoEngine,
                   detail::concat(kNoEngine, " for ", describe(p), ": the heuristics offered ",
                                  search.offered, " engine configs, ", search.nondeterministic,
                                  " non-deterministic, ", search.too_big, " over ",
                                  kMaxWorkspace >> 20, " MiB of workspace, ", search.declined,
                                  " declined, ", search.failed, " failed;", search.why));
}

}  // namespace

int cudnn_loaded_version() { return static_cast<int>(cudnnGetVersion()); }

std::string cudnn_version_string() {
  const int v = cudnn_loaded_version();
  return detail::concat("cuDNN ", v / 10000, ".", v / 100 % 100, ".", v % 100);
}

std::optional<FusedFailure> injected_cudnn_failure(const char* value) {
  return parse_fused_failure(value);
}

CudnnAttention::CudnnAttention(cudaStream_t stream, AttentionPath path)
    : stream_(stream), inject_(injected_cudnn_failure(std::getenv("DIT_CUDNN_FAIL"))),
      log_(cudnn_version_string()), cache_(path, log_) {}

void CudnnAttention::set_deterministic(bool d) {
  if (d != deterministic_) cache_.clear();
  deterministic_ = d;
}

CudnnAttention::~CudnnAttention() {
  cache_.clear();  // the plans before the handle they were built with
  if (handle_) cudnnDestroy(handle_);
}

void CudnnAttention::prepare() {
  try_prepare();
  if (!library_error_.empty() && path() == AttentionPath::Cudnn)
    throw FusedRefusal(FusedFailure::Library, detail::concat(kNotServed, " ", cudnn_version_string(),
                                                             " (library): DIT_ATTENTION=cudnn: cuDNN cannot be used: ",
                                                             library_error_));
}

void CudnnAttention::try_prepare() {
  const AttentionPath p = path();
  if (p == AttentionPath::Kernel || p == AttentionPath::Composed || handle_ || !library_error_.empty())
    return;
  try {
    stage(FusedFailure::Library, inject_, [&] {
      const int v = cudnn_loaded_version();
      DIT_CHECK(v >= kCudnnNeeded, cudnn_version_string(), " is loaded; this build needs ",
                kCudnnNeeded / 10000, ".", kCudnnNeeded / 100 % 100,
                " or newer (cuDNN's unified SDPA operations)");
      return handle();
    });
  } catch (const FusedError& e) {
    library_error_ = e.what();
  }
}

cudnnHandle_t CudnnAttention::handle() {
  if (!handle_) {
    cudnnHandle_t h = nullptr;
    DIT_CUDNN_CHECK(cudnnCreate(&h));
    const cudnnStatus_t rc = cudnnSetStream(h, stream_);
    if (rc != CUDNN_STATUS_SUCCESS) cudnnDestroy(h);
    DIT_CUDNN_CHECK(rc);
    handle_ = h;
  }
  return handle_;
}

const SdpaPlan* CudnnAttention::plan(const SdpaProblem& p, const SdpaPointers& ptrs) {
  // cuDNN's SDPA has no fp32: there the other paths are the implementation, not a fallback,
  // whatever the path (a process may hold an fp32 backend beside a forced bf16 one).
  const AttentionPath path_now = path();
  if (path_now == AttentionPath::Kernel || path_now == AttentionPath::Composed ||
      p.dtype == DType::F32)
    return nullptr;
  const bool backward = p.dir == AttnDir::Backward;
  const auto aligned = [](const void* q) {
    return reinterpret_cast<std::uintptr_t>(q) % kAlign == 0;
  };
  const bool all_aligned = aligned(ptrs.qkv) && aligned(ptrs.out) && aligned(ptrs.lse) &&
                           (!backward || (aligned(ptrs.dout) && aligned(ptrs.dqkv)));
  const Key key{p.n, p.t, p.h, p.e, p.dtype, p.dir, all_aligned};
  return cache_.get(key, describe(p), [&]() -> std::unique_ptr<SdpaPlan> {
    std::string why = ineligible(p, all_aligned);
    if (why.empty() && inject_ == FusedFailure::Ineligible) why = "injected by DIT_CUDNN_FAIL=ineligible";
    if (!why.empty()) throw FusedError(FusedFailure::Ineligible, why);
    try_prepare();
    if (!library_error_.empty()) throw FusedError(FusedFailure::Library, library_error_);
    return build_plan(handle(), p, deterministic_, inject_);
  });
}

std::size_t CudnnAttention::workspace_bytes(const SdpaPlan& plan) const {
  return static_cast<std::size_t>(plan.workspace);
}

bool CudnnAttention::run(const SdpaPlan& plan, const SdpaPointers& ptrs, void* workspace) {
  const SdpaProblem p = plan.problem;  // a copy: a failed run drops the plan
  const std::size_t head_block = static_cast<std::size_t>(p.h * p.e) * dtype_size(p.dtype);
  auto at = [&](void* base, int block) { return static_cast<char*>(base) + block * head_block; };
  std::array<i64, 10> uids{};
  std::array<void*, 10> data{};
  i64 n = 0;
  auto bind = [&](Uid uid, void* ptr) {
    uids[n] = uid;
    data[n++] = ptr;
  };
  bind(kQ, at(ptrs.qkv, 0));
  bind(kK, at(ptrs.qkv, 1));
  bind(kV, at(ptrs.qkv, 2));
  bind(kO, ptrs.out);
  bind(kStats, ptrs.lse);
  bind(kScale, const_cast<float*>(&plan.scale));  // by value: read on the host, never written
  if (p.dir == AttnDir::Backward) {
    bind(kDO, ptrs.dout);
    bind(kDQ, at(ptrs.dqkv, 0));
    bind(kDK, at(ptrs.dqkv, 1));
    bind(kDV, at(ptrs.dqkv, 2));
  }
  try {
    stage(FusedFailure::Execute, inject_, [&] {
      Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
      DIT_SET(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids.data());
      DIT_SET(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, data.data());
      DIT_SET(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
      pack.finalize();
      DIT_CUDNN_CHECK(cudnnBackendExecute(handle(), plan.exec.get(), pack.get()));
      return true;
    });
  } catch (const FusedError& e) {
    const bool aligned = true;  // a plan exists only for aligned pointers
    cache_.run_failed(Key{p.n, p.t, p.h, p.e, p.dtype, p.dir, aligned}, describe(p), e);
    return false;
  }
  return true;
}

}  // namespace dit::cuda

// CUDA backend: construction, device memory, the scratch area, copies (any direction, with dtype
// conversion on the device), fill, transpose_01 and the deterministic sum of squares.
// Downloads (device to host) synchronize, so the host reads the data on return, as on the CPU
// backend; uploads go through a pinned ring (upload_ring.h: one event per slot, allocated at
// start) and return at once (the host's source is copied).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/composed_attention.h"
#include "backend/cuda/cudnn_attention.h"
#include "backend/cuda/gemm.cuh"

namespace dit {

using cuda::i64;

namespace {

// The upload ring at start: enough for the inputs of two steps of every configuration this
// project trains (reserve_uploads() makes it larger before the first step when asked).
constexpr std::size_t kUploadRingBytes = std::size_t{64} << 20;
constexpr int kUploadSlots = 64;

template <typename D, typename S>
__global__ void convert_kernel(D* dst, const S* src, i64 n) {
  for (i64 i = cuda::global_thread(); i < n; i += cuda::grid_stride())
    dst[i] = cuda::from_f32<D>(cuda::to_f32(src[i]));
}

template <typename T>
__global__ void fill_kernel(T* p, i64 n, float value) {
  const T v = cuda::from_f32<T>(value);
  for (i64 i = cuda::global_thread(); i < n; i += cuda::grid_stride()) p[i] = v;
}

__global__ void fill_i32_kernel(std::int32_t* p, i64 n, std::int32_t v) {
  for (i64 i = cuda::global_thread(); i < n; i += cuda::grid_stride()) p[i] = v;
}

// dst (B, A, C) = src (A, B, C) with the leading dims swapped; U is the element width and I the
// index type: 32-bit whenever a * b * c fits (two 32-bit divisions per element instead
// of three 64-bit ones, which the GPU emulates in tens of instructions).
template <typename U, typename I>
__global__ void transpose01_kernel(const U* src, U* dst, I a, I b, I c) {
  const I n = a * b * c;
  for (I o = static_cast<I>(cuda::global_thread()); o < n; o += static_cast<I>(cuda::grid_stride())) {
    const I row = o / c, k = o - row * c;  // dst (b, a, c): row = j * a + i
    const I j = row / a, i = row - j * a;
    dst[o] = src[(i * b + j) * c + k];
  }
}

// Per-block partial sums of x^2 in double; a fixed grid keeps the summation order fixed.
constexpr int kSumBlocks = 1024;
template <typename T>
__global__ void sum_squares_partial(const T* x, i64 n, double* partial) {
  double s = 0;
  for (i64 i = cuda::global_thread(); i < n; i += cuda::grid_stride()) {
    const double v = cuda::to_f32(x[i]);
    s += v * v;
  }
  s = cuda::block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}
__global__ void sum_partials(const double* partial, int count, double* out) {
  double s = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  s = cuda::block_sum(s);
  if (threadIdx.x == 0) *out = s;
}

// dst = src with a dtype change, both on the device.
void convert_on_device(void* dst, DType dt, const void* src, DType st, i64 n, cudaStream_t s) {
  cuda::dispatch_float(dt, "copy (destination)", [&](auto d) {
    using D = decltype(d);
    cuda::dispatch_float(st, "copy (source)", [&](auto sv) {
      using S = decltype(sv);
      convert_kernel<D, S><<<cuda::grid_for(n), cuda::kThreads, 0, s>>>(
          static_cast<D*>(dst), static_cast<const S*>(src), n);
      DIT_CUDA_LAUNCH_CHECK();
    });
  });
}

}  // namespace

CudaBackend::CudaBackend(DType compute, int device) : compute_(compute) {
  DIT_CHECK(compute == DType::F32 || compute == DType::BF16 || compute == DType::F16,
            "the CUDA backend computes in fp32, bf16 or fp16, not ", dtype_name(compute));
  const AttentionPath attention_path = attention_path_from_env();  // may throw
  if (device >= 0) DIT_CUDA_CHECK(cudaSetDevice(device));
  DIT_CUDA_CHECK(cudaGetDevice(&device_));
  DIT_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device_));
  DIT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  // Device memory comes from the stream-ordered pool where the device has one: allocating and
  // freeing then never synchronize the device (cudaMalloc/cudaFree do, and a device-wide wait in
  // the middle of a pipeline step can deadlock NCCL sends against their peers' receives). The pool
  // keeps what it has (no release threshold), so steady-state steps allocate nothing new.
  int pools = 0;
  DIT_CUDA_CHECK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device_));
  stream_ordered_ = pools != 0;
  if (stream_ordered_) {
    cudaMemPool_t pool = nullptr;
    DIT_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device_));
    std::uint64_t keep = ~std::uint64_t{0};
    DIT_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  }
  DIT_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&fault_host_), sizeof(int),
                               cudaHostAllocMapped));
  *fault_host_ = 0;
  DIT_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&fault_dev_), fault_host_, 0));
  DIT_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&result_host_), sizeof(double),
                               cudaHostAllocMapped));
  DIT_CUDA_CHECK(
      cudaHostGetDevicePointer(reinterpret_cast<void**>(&result_dev_), result_host_, 0));
  make_upload_ring(kUploadRingBytes);
  gemm_ = std::make_unique<cuda::GemmContext>(stream_);
  cudnn_attention_ = std::make_unique<cuda::CudnnAttention>(stream_, attention_path);
  composed_ = std::make_unique<ComposedAttention>(*this);
  // 16-bit attention goes through cuDNN: check it and make its handle now rather than inside the
  // first step (a failure is a fallback to the composed attention, said once).
  if (compute != DType::F32) cudnn_attention_->prepare();
}

// No throwing here: errors of the teardown are printed, the process is usually ending anyway.
CudaBackend::~CudaBackend() {
  cudaError_t rc = cudaStreamSynchronize(stream_);
  gemm_.reset();
  cudnn_attention_.reset();
  composed_.reset();
  if (scratch_) cudaFree(scratch_);
  if (fault_host_) cudaFreeHost(fault_host_);
  if (result_host_) cudaFreeHost(result_host_);
  if (pinned_) cudaFreeHost(pinned_);
  for (cudaEvent_t e : ring_events_) cudaEventDestroy(e);
  for (cudaEvent_t e : timeline_events_) cudaEventDestroy(e);
  if (stream_) cudaStreamDestroy(stream_);
  if (rc != cudaSuccess)
    std::fprintf(stderr, "CUDA backend teardown: %s\n", cudaGetErrorString(rc));
}

void CudaBackend::set_attention_path(AttentionPath path) { cudnn_attention_->set_path(path); }

std::size_t CudaBackend::workspace_bytes() const {
  return scratch_bytes_ + (composed_ ? composed_->workspace_bytes() : 0);
}

std::string CudaBackend::attention_note() const {
  const std::string fallbacks = cudnn_attention_->note();
  if (!fallbacks.empty()) return fallbacks;
  switch (cudnn_attention_->path()) {
    case AttentionPath::Kernel: return "plain attention kernels (DIT_ATTENTION=kernel)";
    case AttentionPath::Composed: return "composed attention (DIT_ATTENTION=composed)";
    default: break;
  }
  return compute_ == DType::F32 ? "composed attention (cuDNN's SDPA has no fp32)"
                                : cuda::cudnn_version_string() + " fused attention";
}
void CudaBackend::set_deterministic(bool d) { cudnn_attention_->set_deterministic(d); }

std::size_t CudaBackend::mark() {
  if (next_event_ == timeline_events_.size()) {
    cudaEvent_t e = nullptr;
    DIT_CUDA_CHECK(cudaEventCreate(&e));
    timeline_events_.push_back(e);
  }
  DIT_CUDA_CHECK(cudaEventRecord(timeline_events_[next_event_], stream_));
  return next_event_++;
}

double CudaBackend::seconds_between(std::size_t a, std::size_t b) {
  DIT_CHECK(a < next_event_ && b < next_event_, "timeline marks ", a, " and ", b, " of ", next_event_);
  DIT_CUDA_CHECK(cudaEventSynchronize(timeline_events_[b]));
  float ms = 0;
  DIT_CUDA_CHECK(cudaEventElapsedTime(&ms, timeline_events_[a], timeline_events_[b]));
  return ms / 1e3;
}

void* CudaBackend::allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  const cudaError_t rc = stream_ordered_ ? cudaMallocAsync(&p, bytes, stream_) : cudaMalloc(&p, bytes);
  if (rc != cudaSuccess) {
    cudaGetLastError();
    std::size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    DIT_FAIL("CUDA backend: cannot allocate ", bytes, " bytes on device ", device_, " (",
             free_b >> 20, " MiB of ", total_b >> 20, " MiB free): ", cudaGetErrorString(rc));
  }
  return p;
}

bool CudaBackend::device_memory(std::size_t* free, std::size_t* total) const {
  DIT_CUDA_CHECK(cudaSetDevice(device_));
  DIT_CUDA_CHECK(cudaMemGetInfo(free, total));
  return true;
}

void CudaBackend::deallocate(void* p) {
  if (!p) return;
  // Called from destructors: report, never throw.
  const cudaError_t rc = stream_ordered_ ? cudaFreeAsync(p, stream_) : cudaFree(p);
  if (rc != cudaSuccess) std::fprintf(stderr, "CUDA backend: cudaFree: %s\n", cudaGetErrorString(rc));
}

void* CudaBackend::scratch(std::size_t bytes) {
  if (bytes > scratch_bytes_) {
    // Stream-ordered: the old block is released after the primitives queued before that still
    // read it, and nothing synchronizes the device (cudaFree would, and a device-wide wait in the
    // middle of a pipeline step can deadlock NCCL sends against their peers' receives).
    if (scratch_) deallocate(scratch_);
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    // A quarter of headroom, in whole MiB, so a slowly growing need does not reallocate often.
    const std::size_t mib = std::size_t{1} << 20;
    const std::size_t want = (bytes + bytes / 4 + mib - 1) / mib * mib;
    scratch_ = allocate(want);
    scratch_bytes_ = want;
  }
  return scratch_;
}

void CudaBackend::check_fault_flag() {
  const int f = *static_cast<volatile int*>(fault_host_);
  if (f == 0) return;
  *static_cast<volatile int*>(fault_host_) = 0;
  DIT_FAIL("CUDA backend: a kernel rejected its input (code ", f,
           f == 1 ? ": an embedding id outside the table" : f == 2 ? ": a timestep outside the schedule" : "",
           ")");
}

void CudaBackend::synchronize() {
  count_sync();
  DIT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  check_fault_flag();
}

void CudaBackend::make_upload_ring(std::size_t bytes) {
  if (pinned_) {  // at start only (reserve_uploads): every earlier upload must have left
    synchronize();
    DIT_CUDA_CHECK(cudaFreeHost(pinned_));
    pinned_ = nullptr;
  }
  ring_ = std::make_unique<UploadRing>(bytes, kUploadSlots);
  DIT_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&pinned_), ring_->capacity(), cudaHostAllocDefault));
  while (static_cast<int>(ring_events_.size()) < ring_->slots()) {
    cudaEvent_t e = nullptr;
    DIT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    ring_events_.push_back(e);
  }
}

void CudaBackend::reserve_uploads(std::size_t bytes_per_step) {
  // Two steps' worth in pieces of at most half the ring each: an upload never waits for the step
  // before it.
  const std::size_t want = 2 * bytes_per_step + 2 * kUploadSlots * UploadRing::kAlign;
  if (want > ring_->capacity()) make_upload_ring(want);
}

void CudaBackend::wait_upload_slot(int slot) {
  const cudaError_t rc = cudaEventQuery(ring_events_[slot]);
  if (rc == cudaSuccess) return;
  if (rc != cudaErrorNotReady) DIT_CUDA_CHECK(rc);
  cudaGetLastError();  // a not-ready query is not an error
  count_sync();
  DIT_CUDA_CHECK(cudaEventSynchronize(ring_events_[slot]));
}

void CudaBackend::upload(const Tensor& dst, const Tensor& src) {
  // A converting upload lands in scratch as it is, then the device converts it.
  char* to = static_cast<char*>(dst.dtype == src.dtype ? dst.data : scratch(src.bytes()));
  const char* from = static_cast<const char*>(src.data);
  std::size_t done = 0;
  for (const std::size_t piece : ring_->pieces(src.bytes())) {
    const UploadRing::Claim c = ring_->claim(piece);
    for (int w : c.wait) wait_upload_slot(w);
    std::memcpy(pinned_ + c.offset, from + done, piece);
    DIT_CUDA_CHECK(cudaMemcpyAsync(to + done, pinned_ + c.offset, piece, cudaMemcpyHostToDevice, stream_));
    DIT_CUDA_CHECK(cudaEventRecord(ring_events_[c.slot], stream_));
    done += piece;
  }
  if (dst.dtype != src.dtype)
    convert_on_device(dst.data, dst.dtype, to, src.dtype, dst.numel(), stream_);
}

void CudaBackend::copy(const Tensor& dst, const Tensor& src) {
  cuda::same_numel(dst, src, "copy");
  const i64 n = dst.numel();
  if (n == 0) return;
  const bool dst_host = dst.device == Device::Host, src_host = src.device == Device::Host;
  if (dst.dtype != src.dtype)
    DIT_CHECK(dst.dtype != DType::I32 && src.dtype != DType::I32, "copy: no conversion from ",
              dtype_name(src.dtype), " to ", dtype_name(dst.dtype));
  if (dst_host && src_host) {
    if (dst.dtype == src.dtype) {
      std::memmove(dst.data, src.data, dst.bytes());
    } else {
      // Host to host: core/dtype.h's conversions round to nearest even, as the device does.
      for (i64 i = 0; i < n; ++i)
        store_from_f32(dst.data, dst.dtype, i, load_as_f32(src.data, src.dtype, i));
    }
    return;
  }
  if (src_host) {  // an upload: through the pinned ring, asynchronous
    upload(dst, src);
    return;
  }
  if (dst.dtype == src.dtype) {
    DIT_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, dst.bytes(), cudaMemcpyDefault, stream_));
  } else if (!dst_host && !src_host) {
    convert_on_device(dst.data, dst.dtype, src.data, src.dtype, n, stream_);
  } else {  // convert on the device, then move the converted bytes
    void* stage = scratch(dst.bytes());
    convert_on_device(stage, dst.dtype, src.data, src.dtype, n, stream_);
    DIT_CUDA_CHECK(
        cudaMemcpyAsync(dst.data, stage, dst.bytes(), cudaMemcpyDeviceToHost, stream_));
  }
  if (dst_host) synchronize();  // a download: the host reads it on return
}

void CudaBackend::fill(const Tensor& t, float value) {
  cuda::check_on_device(t, "fill");
  const i64 n = t.numel();
  if (n == 0) return;
  if (t.dtype == DType::I32) {
    fill_i32_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, stream_>>>(
        t.as<std::int32_t>(), n, static_cast<std::int32_t>(value));
    DIT_CUDA_LAUNCH_CHECK();
    return;
  }
  cuda::dispatch_float(t.dtype, "fill", [&](auto tag) {
    using T = decltype(tag);
    fill_kernel<T><<<cuda::grid_for(n), cuda::kThreads, 0, stream_>>>(t.as<T>(), n, value);
    DIT_CUDA_LAUNCH_CHECK();
  });
}

void CudaBackend::transpose_01(const Tensor& src, const Tensor& dst) {
  DIT_CHECK(src.shape.rank == 3 && dst.shape.rank == 3 && src.dim(0) == dst.dim(1) &&
                src.dim(1) == dst.dim(0) && src.dim(2) == dst.dim(2),
            "transpose_01: ", src.shape.str(), " -> ", dst.shape.str());
  cuda::check_on_device(src, "transpose_01 src");
  cuda::check_on_device(dst, "transpose_01 dst");
  cuda::same_dtype(src, dst, "transpose_01");
  const i64 n = src.numel();
  if (n == 0) return;
  cuda::dispatch_width(src.dtype, [&](auto tag) {
    using U = decltype(tag);
    const auto launch = [&](auto index) {
      using I = decltype(index);
      transpose01_kernel<U, I><<<cuda::grid_for(n), cuda::kThreads, 0, stream_>>>(
          src.as<U>(), dst.as<U>(), static_cast<I>(src.dim(0)), static_cast<I>(src.dim(1)),
          static_cast<I>(src.dim(2)));
    };
    // Unsigned 32-bit while n plus one grid stride (at most 2^28) cannot wrap 2^32.
    if (n <= std::numeric_limits<std::int32_t>::max()) launch(std::uint32_t{});
    else launch(i64{});
    DIT_CUDA_LAUNCH_CHECK();
  });
}

double CudaBackend::sum_squares(const Tensor& x) {
  cuda::check_on_device(x, "sum_squares");
  const i64 n = x.numel();
  if (n == 0) return 0.0;
  const int blocks = std::min(kSumBlocks, cuda::grid_for(n));
  auto* partial = static_cast<double*>(scratch(blocks * sizeof(double)));
  cuda::dispatch_float(x.dtype, "sum_squares", [&](auto tag) {
    using T = decltype(tag);
    sum_squares_partial<T><<<blocks, cuda::kThreads, 0, stream_>>>(x.as<T>(), n, partial);
    DIT_CUDA_LAUNCH_CHECK();
  });
  return sum_on_host(partial, blocks);
}

double CudaBackend::sum_on_host(const double* partial, int count) {
  sum_partials<<<1, 1024, 0, stream_>>>(partial, count, result_dev_);
  DIT_CUDA_LAUNCH_CHECK();
  synchronize();
  return *static_cast<volatile double*>(result_host_);
}

}  // namespace dit

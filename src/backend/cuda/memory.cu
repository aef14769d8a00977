// CUDA backend: construction, device memory, the scratch area, copies (any direction, with dtype
// conversion on the device), fill, transpose_01 and the deterministic sum of squares.
// Downloads (device to host) synchronize, so the host reads the data on return, as on the CPU
// backend; uploads go through a pinned ring and return at once (the host's source is copied).
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cudnn_attention.h"
#include "backend/cuda/gemm.cuh"

namespace dit {

using cuda::i64;

namespace {

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

// dst (B, A, C) = src (A, B, C) with the leading dims swapped; U is the element width.
template <typename U>
__global__ void transpose01_kernel(const U* src, U* dst, i64 a, i64 b, i64 c) {
  const i64 n = a * b * c;
  for (i64 o = cuda::global_thread(); o < n; o += cuda::grid_stride()) {
    const i64 k = o % c, i = (o / c) % a, j = o / (a * c);
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
  const cuda::AttentionPath attention_path = cuda::attention_path_from_env();  // may throw
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
  DIT_CUDA_CHECK(cudaEventCreateWithFlags(&pinned_done_, cudaEventDisableTiming));
  gemm_ = std::make_unique<cuda::GemmContext>(stream_);
  cudnn_attention_ = std::make_unique<cuda::CudnnAttention>(stream_, attention_path);
  // 16-bit attention goes through cuDNN: make its handle now rather than inside the first step.
  if (compute != DType::F32) cudnn_attention_->prepare();
}

// No throwing here: errors of the teardown are printed, the process is usually ending anyway.
CudaBackend::~CudaBackend() {
  cudaError_t rc = cudaStreamSynchronize(stream_);
  gemm_.reset();
  cudnn_attention_.reset();
  if (scratch_) cudaFree(scratch_);
  if (fault_host_) cudaFreeHost(fault_host_);
  if (result_host_) cudaFreeHost(result_host_);
  if (pinned_) cudaFreeHost(pinned_);
  if (pinned_done_) cudaEventDestroy(pinned_done_);
  for (cudaEvent_t e : timeline_events_) cudaEventDestroy(e);
  if (stream_) cudaStreamDestroy(stream_);
  if (rc != cudaSuccess)
    std::fprintf(stderr, "CUDA backend teardown: %s\n", cudaGetErrorString(rc));
}

void CudaBackend::set_attention_path(cuda::AttentionPath path) { cudnn_attention_->set_path(path); }
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

void* CudaBackend::stage_upload(const void* src, std::size_t bytes) {
  const std::size_t need = (bytes + 255) / 256 * 256;
  if (need > pinned_bytes_ - pinned_off_ || !pinned_) {
    // Every earlier upload must have left the ring before it is reused or replaced.
    if (pinned_ && cudaEventQuery(pinned_done_) == cudaErrorNotReady) {
      count_sync();
      DIT_CUDA_CHECK(cudaEventSynchronize(pinned_done_));
    }
    cudaGetLastError();  // a not-ready query is not an error
    if (need > pinned_bytes_) {
      if (pinned_) DIT_CUDA_CHECK(cudaFreeHost(pinned_));
      pinned_bytes_ = std::max({need, 2 * pinned_bytes_, std::size_t{16} << 20});
      DIT_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&pinned_), pinned_bytes_, cudaHostAllocDefault));
    }
    pinned_off_ = 0;
  }
  char* at = pinned_ + pinned_off_;
  std::memcpy(at, src, bytes);
  pinned_off_ += need;
  return at;
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
    const void* pinned = stage_upload(src.data, src.bytes());
    void* to = dst.dtype == src.dtype ? dst.data : scratch(src.bytes());
    DIT_CUDA_CHECK(cudaMemcpyAsync(to, pinned, src.bytes(), cudaMemcpyHostToDevice, stream_));
    DIT_CUDA_CHECK(cudaEventRecord(pinned_done_, stream_));
    if (dst.dtype != src.dtype) convert_on_device(dst.data, dst.dtype, to, src.dtype, n, stream_);
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
    transpose01_kernel<U><<<cuda::grid_for(n), cuda::kThreads, 0, stream_>>>(
        src.as<U>(), dst.as<U>(), src.dim(0), src.dim(1), src.dim(2));
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

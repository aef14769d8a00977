// CUDA backend: elementwise primitives (axpy, scale, GELU-tanh, SiLU, ReLU, row broadcasts) and the
// optimizer steps over flat ranges. The formulas are the shared math.h functors; tensors of any
// float dtype are loaded to fp32, computed, and stored back rounded to nearest.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/optim_math.cuh"

namespace dit {

using cuda::i64;
using cuda::from_f32;
using cuda::to_f32;

namespace {

// Grid-stride loop over [0, n) calling op(i); op is a small functor struct (no lambdas, so the
// kernels stay plain templates that nvcc instantiates per dtype).
template <typename Op>
__global__ void for_each_kernel(i64 n, Op op) {
  for (i64 i = cuda::global_thread(); i < n; i += cuda::grid_stride()) op(i);
}

template <typename Op>
void launch(i64 n, cudaStream_t s, const Op& op) {
  if (n == 0) return;
  for_each_kernel<<<cuda::grid_for(n), cuda::kThreads, 0, s>>>(n, op);
  DIT_CUDA_LAUNCH_CHECK();
}

template <typename X, typename Y>
struct Axpy {
  float alpha;
  const X* x;
  Y* y;
  __device__ void operator()(i64 i) const { y[i] = from_f32<Y>(to_f32(y[i]) + alpha * to_f32(x[i])); }
};

template <typename T>
struct Scale {
  T* x;
  float alpha;
  __device__ void operator()(i64 i) const { x[i] = from_f32<T>(to_f32(x[i]) * alpha); }
};

template <typename T, typename Fn>
struct Forward {
  const T* x;
  T* y;
  __device__ void operator()(i64 i) const { y[i] = from_f32<T>(Fn::forward(to_f32(x[i]))); }
};

// dx = dy * f'(x) (+ dx); reads dy[i] before writing dx[i], so dx may alias dy.
template <typename T, typename Fn>
struct Backward {
  const T* x;
  const T* dy;
  T* dx;
  bool accumulate;
  __device__ void operator()(i64 i) const {
    const float g = to_f32(dy[i]) * Fn::derivative(to_f32(x[i]));
    dx[i] = from_f32<T>(accumulate ? to_f32(dx[i]) + g : g);
  }
};

template <typename Y, typename V>
struct AddRowwise {
  Y* y;
  const V* v;
  i64 len;
  __device__ void operator()(i64 i) const { y[i] = from_f32<Y>(to_f32(y[i]) + to_f32(v[i % len])); }
};

template <typename G>
struct AdamW {
  float* p;
  const G* g;
  float* m;
  float* v;
  math::AdamWParams h;
  __device__ void operator()(i64 i) const { cuda::adamw_update_rn(p[i], to_f32(g[i]), m[i], v[i], h); }
};

template <typename P>
struct Ema {
  float* ema;
  const P* p;
  float decay;
  __device__ void operator()(i64 i) const { ema[i] = cuda::ema_update_rn(ema[i], to_f32(p[i]), decay); }
};

// An activation's forward and backward over whole tensors (gelu_tanh, silu): one set of checks and
// one launch each. `op` names the primitive in messages; `x`, `y`, `dy`, `dx` name its tensors.
struct ActivationNames {
  const char *op, *x, *y, *dy, *dx;
};

template <typename Fn>
void activation_fwd(cudaStream_t s, const ActivationNames& n, const Tensor& x, const Tensor& y) {
  cuda::same_numel(x, y, n.op);
  cuda::check_on_device(x, n.x);
  cuda::check_on_device(y, n.y);
  cuda::same_dtype(x, y, n.op);
  cuda::dispatch_float(x.dtype, n.op, [&](auto tag) {
    using T = decltype(tag);
    launch(x.numel(), s, Forward<T, Fn>{x.as<T>(), y.as<T>()});
  });
}

template <typename Fn>
void activation_bwd(cudaStream_t s, const ActivationNames& n, const Tensor& x, const Tensor& dy,
                    const Tensor& dx, Accumulate acc) {
  cuda::same_numel(x, dy, n.op);
  cuda::same_numel(x, dx, n.op);
  cuda::check_on_device(x, n.x);
  cuda::check_on_device(dy, n.dy);
  cuda::check_on_device(dx, n.dx);
  cuda::same_dtype(x, dy, n.op);
  cuda::same_dtype(x, dx, n.op);
  cuda::dispatch_float(x.dtype, n.op, [&](auto tag) {
    using T = decltype(tag);
    launch(x.numel(), s, Backward<T, Fn>{x.as<T>(), dy.as<T>(), dx.as<T>(), acc == Accumulate::Add});
  });
}

}  // namespace

void CudaBackend::axpy(float alpha, const Tensor& x, const Tensor& y) {
  cuda::same_numel(x, y, "axpy");
  cuda::check_on_device(x, "axpy x");
  cuda::check_on_device(y, "axpy y");
  cuda::dispatch_float(y.dtype, "axpy y", [&](auto ty) {
    using Y = decltype(ty);
    cuda::dispatch_float(x.dtype, "axpy x", [&](auto tx) {
      using X = decltype(tx);
      launch(x.numel(), stream_, Axpy<X, Y>{alpha, x.as<X>(), y.as<Y>()});
    });
  });
}

void CudaBackend::scale(const Tensor& x, float alpha) {
  cuda::check_on_device(x, "scale");
  cuda::dispatch_float(x.dtype, "scale", [&](auto tag) {
    using T = decltype(tag);
    launch(x.numel(), stream_, Scale<T>{x.as<T>(), alpha});
  });
}

void CudaBackend::gelu_tanh_fwd(const Tensor& x, const Tensor& y) {
  activation_fwd<math::GeluTanh>(stream_, {"gelu_tanh_fwd", "gelu x", "gelu y", "", ""}, x, y);
}

void CudaBackend::gelu_tanh_bwd(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  activation_bwd<math::GeluTanh>(stream_, {"gelu_tanh_bwd", "gelu x", "", "gelu dy", "gelu dx"}, x, dy, dx,
                                 Accumulate::Overwrite);
}

void CudaBackend::silu_fwd(const Tensor& x, const Tensor& y) {
  activation_fwd<math::Silu>(stream_, {"silu_fwd", "silu x", "silu y", "", ""}, x, y);
}

void CudaBackend::relu_fwd(const Tensor& x, const Tensor& y) {
  activation_fwd<math::Relu>(stream_, {"relu_fwd", "relu x", "relu y", "", ""}, x, y);
}

void CudaBackend::silu_bwd(const Tensor& x, const Tensor& dy, const Tensor& dx, Accumulate acc) {
  activation_bwd<math::Silu>(stream_, {"silu_bwd", "silu x", "", "silu dy", "silu dx"}, x, dy, dx, acc);
}

void CudaBackend::add_rowwise(const Tensor& y, const Tensor& v) {
  const i64 l = v.numel();
  DIT_CHECK(l > 0 && y.numel() % l == 0, "add_rowwise: ", v.shape.str(), " does not tile ",
            y.shape.str());
  cuda::check_on_device(y, "add_rowwise y");
  cuda::check_on_device(v, "add_rowwise v");
  cuda::dispatch_float(y.dtype, "add_rowwise y", [&](auto ty) {
    using Y = decltype(ty);
    cuda::dispatch_float(v.dtype, "add_rowwise v", [&](auto tv) {
      using V = decltype(tv);
      launch(y.numel(), stream_, AddRowwise<Y, V>{y.as<Y>(), v.as<V>(), l});
    });
  });
}

void CudaBackend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                             const Tensor& exp_avg_sq, const math::AdamWParams& h) {
  cuda::same_numel(param, grad, "adamw_step grad");
  cuda::same_numel(param, exp_avg, "adamw_step exp_avg");
  cuda::same_numel(param, exp_avg_sq, "adamw_step exp_avg_sq");
  cuda::check_f32(param, "adamw param (fp32 master)");
  cuda::check_f32(exp_avg, "adamw exp_avg");
  cuda::check_f32(exp_avg_sq, "adamw exp_avg_sq");
  cuda::check_on_device(grad, "adamw grad");
  cuda::dispatch_float(grad.dtype, "adamw grad", [&](auto tag) {
    using G = decltype(tag);
    launch(param.numel(), stream_,
           AdamW<G>{param.as<float>(), grad.as<G>(), exp_avg.as<float>(), exp_avg_sq.as<float>(), h});
  });
}

void CudaBackend::ema_step(const Tensor& ema, const Tensor& param, float decay) {
  cuda::same_numel(ema, param, "ema_step");
  cuda::check_f32(ema, "ema");
  cuda::check_on_device(param, "ema param");
  cuda::dispatch_float(param.dtype, "ema param", [&](auto tag) {
    using P = decltype(tag);
    launch(ema.numel(), stream_, Ema<P>{ema.as<float>(), param.as<P>(), decay});
  });
}

}  // namespace dit

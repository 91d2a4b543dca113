// Solution — out = residual + act(x), the activation fused with the residual add, as a PyTorch operator.
//
// Memory-bound: three streams (x, residual in; out), one pass. Each thread loads 16 bytes of x and of the
// residual (8 bfloat16 or 4 float32: llm.c's Packed128) and stores 16 bytes of out, so a warp moves 512
// contiguous bytes per access and an SM has enough bytes in flight; the first n % VEC threads also take
// one element each of the tail. Math in float32, rounded once. exp through __expf and the divisions
// through __fdividef, in forms that stay finite when exp overflows (see gelu and silu).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>

constexpr int THREADS = 256;

enum class Act { Gelu, Silu };

// GELU, tanh approximation, with tanh(u) = 1 - 2 / (exp(2u) + 1): exp(2u) = inf gives 1 and 0 gives -1,
// where (exp(2u) - 1) / (exp(2u) + 1) would be inf / inf = NaN for x above 10.
__device__ __forceinline__ float gelu(float v) {
    const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
    const float t = 1.f - __fdividef(2.f, __expf(2.f * u) + 1.f);
    return 0.5f * v * (1.f + t);
}

// SiLU, x sigmoid(x) = x / (1 + exp(-x)): exp(-x) = inf for x below -88 gives -0, where x exp(x) / (1 + exp(x))
// would be inf / inf = NaN for x above 88.
__device__ __forceinline__ float silu(float v) { return __fdividef(v, 1.f + __expf(-v)); }

template <Act A>
__device__ __forceinline__ float activate(float v) {
    return A == Act::Gelu ? gelu(v) : silu(v);
}

template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {  // VEC elements moved by one load or store
    T v[VEC];
};

template <typename T, Act A>
__device__ __forceinline__ T fused(T x, T r) {
    return static_cast<T>(static_cast<float>(r) + activate<A>(static_cast<float>(x)));
}

// Thread i handles elements [VEC i, VEC i + VEC); threads 0 .. n % VEC - 1 also one element of the tail.
template <typename T, int VEC, Act A>
__global__ void __launch_bounds__(THREADS) residual_activation_kernel(const T* __restrict__ x,
                                                                      const T* __restrict__ residual,
                                                                      T* __restrict__ out, long long n) {
    using P = Pack<T, VEC>;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long n_vec = n / VEC;
    if (i < n_vec) {
        const P a = reinterpret_cast<const P*>(x)[i];
        const P r = reinterpret_cast<const P*>(residual)[i];
        P o;
#pragma unroll
        for (int k = 0; k < VEC; ++k) o.v[k] = fused<T, A>(a.v[k], r.v[k]);
        reinterpret_cast<P*>(out)[i] = o;
    }
    const long long tail = n_vec * VEC + i;
    if (i < VEC && tail < n) out[tail] = fused<T, A>(x[tail], residual[tail]);
}

template <typename T, int VEC, Act A>
void launch(const at::Tensor& x, const at::Tensor& residual, at::Tensor& out) {
    const long long n = x.numel();
    const long long threads_needed = std::max<long long>(n / VEC, n % VEC);
    const long long blocks = (threads_needed + THREADS - 1) / THREADS;
    residual_activation_kernel<T, VEC, A><<<(unsigned)blocks, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<T>(), residual.data_ptr<T>(), out.data_ptr<T>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// 16-byte accesses where all three pointers allow them (a view that starts mid-allocation may not).
template <typename T, Act A>
void dispatch_width(const at::Tensor& x, const at::Tensor& residual, at::Tensor& out) {
    if (aligned16(x.data_ptr()) && aligned16(residual.data_ptr()) && aligned16(out.data_ptr())) {
        launch<T, 16 / sizeof(T), A>(x, residual, out);
    } else {
        launch<T, 1, A>(x, residual, out);
    }
}

template <typename T>
void dispatch_act(const at::Tensor& x, const at::Tensor& residual, at::Tensor& out, Act act) {
    if (act == Act::Gelu) {
        dispatch_width<T, Act::Gelu>(x, residual, out);
    } else {
        dispatch_width<T, Act::Silu>(x, residual, out);
    }
}

Act parse_act(c10::string_view act) {
    if (act == "gelu") return Act::Gelu;
    TORCH_CHECK(act == "silu", "residual_activation: act must be \"gelu\" or \"silu\", not \"", std::string(act), "\"");
    return Act::Silu;
}

at::Tensor residual_activation_cuda(const at::Tensor& x, const at::Tensor& residual, c10::string_view act_name) {
    TORCH_CHECK(x.is_cuda() && residual.device() == x.device(), "residual_activation: x and residual must be on one CUDA device");
    TORCH_CHECK(x.sizes() == residual.sizes() && x.scalar_type() == residual.scalar_type(),
                "residual_activation: x and residual must have the same shape and dtype");
    TORCH_CHECK(x.is_contiguous() && residual.is_contiguous(), "residual_activation: x and residual must be contiguous");
    const Act act = parse_act(act_name);
    const c10::cuda::CUDAGuard guard(x.device());
    auto out = at::empty_like(x);
    if (out.numel() == 0) return out;
    switch (x.scalar_type()) {
        case at::kFloat: dispatch_act<float>(x, residual, out, act); break;
        case at::kBFloat16: dispatch_act<at::BFloat16>(x, residual, out, act); break;
        case at::kHalf: dispatch_act<at::Half>(x, residual, out, act); break;
        default: TORCH_CHECK(false, "residual_activation: x must be float32, bfloat16 or float16, not ", x.scalar_type());
    }
    return out;
}

TORCH_LIBRARY(TORCH_EXTENSION_NAME, m) {
    m.def("residual_activation(Tensor x, Tensor residual, str act) -> Tensor");
}

TORCH_LIBRARY_IMPL(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("residual_activation", &residual_activation_cuda); }

// Solution — GELU (tanh approximation) as a PyTorch operator.
// Memory-bound: 16-byte loads and stores per thread (float4) with a scalar tail, a grid sized to the
// data; tanh through the fast __expf-based identity tanh(u) = 1 - 2 / (exp(2u) + 1).
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

__device__ __forceinline__ float gelu(float v) {
    const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
    const float t = 1.f - 2.f / (__expf(2.f * u) + 1.f);
    return 0.5f * v * (1.f + t);
}

__global__ void gelu_kernel(const float* __restrict__ x, float* __restrict__ y, long long n) {
    const long long i4 = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long n4 = n / 4;
    if (i4 < n4) {
        float4 v = reinterpret_cast<const float4*>(x)[i4];
        reinterpret_cast<float4*>(y)[i4] = make_float4(gelu(v.x), gelu(v.y), gelu(v.z), gelu(v.w));
    }
    const long long tail = n4 * 4 + i4;
    if (i4 < 4 && tail < n) y[tail] = gelu(x[tail]);
}

at::Tensor gelu_cuda(const at::Tensor& x) {
    TORCH_CHECK(x.is_cuda(), "gelu: x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == at::kFloat, "gelu: x must be float32");
    TORCH_CHECK(x.is_contiguous(), "gelu: x must be contiguous");
    const c10::cuda::CUDAGuard guard(x.device());
    auto y = at::empty_like(x);
    const long long n = x.numel();
    if (n == 0) return y;
    const int threads = 256;
    const long long blocks = (n / 4 + threads - 1) / threads + 1;
    gelu_kernel<<<(unsigned)blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

TORCH_LIBRARY(TORCH_EXTENSION_NAME, m) { m.def("gelu(Tensor x) -> Tensor"); }

TORCH_LIBRARY_IMPL(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("gelu", &gelu_cuda); }

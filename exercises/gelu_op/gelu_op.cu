// Week 3 — a CUDA kernel bound as a PyTorch operator. Read README.md in this folder.
// Grade with: kcourse grade week3 gelu_op
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <torch/library.h>

__global__ void gelu_kernel(const float* x, float* y, long long n) {
    // TODO: y[i] = 0.5f * x[i] * (1 + tanhf(0.7978845608f * (x[i] + 0.044715f * x[i]^3))) for i < n
}

at::Tensor gelu_cuda(const at::Tensor& x) {
    // TODO: TORCH_CHECK that x is a contiguous float32 CUDA tensor;
    //       auto y = at::empty_like(x); launch gelu_kernel on at::cuda::getCurrentCUDAStream();
    //       check cudaGetLastError(); return y.
    TORCH_CHECK(false, "gelu_cuda: not implemented yet");
}

// TODO: declare the operator's schema and register gelu_cuda as its CUDA implementation:
// TORCH_LIBRARY(TORCH_EXTENSION_NAME, m) { m.def("gelu(Tensor x) -> Tensor"); }
// TORCH_LIBRARY_IMPL(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("gelu", &gelu_cuda); }

// RMS norm in CUDA — a row reduction three ways (V1 naive, V2 warp-reduce, V3 float4: README.md's ladder).
//
// x and out are DEVICE pointers to M×N float32 matrices, row-major, each with its own row stride (in
// elements): row i of x starts at x + i * x_row_stride, which may be more than N (a row slice of a wider
// tensor). weight has N elements. With eps = 1e-6, write for each row i:
//     out[i, j] = x[i, j] / sqrt(mean_j(x[i, j]^2) + eps) * weight[j]
// Grade with: kcourse grade rms_norm;  compare versions: kcourse compare rms_norm v1.cu v2.cu v3.cu
#include <cuda_runtime.h>

#include <cmath>

constexpr float EPS = 1e-6f;

__global__ void rms_norm_kernel(const float* x, const float* weight, float* out, int M, int N, int x_row_stride,
                                int out_row_stride) {
    // TODO V1 (naive): one thread per row.
    //   int row = blockIdx.x * blockDim.x + threadIdx.x; if (row >= M) return;
    //   const float* x_row = x + (long long)row * x_row_stride;   (out_row alike, with out_row_stride)
    //   sum x_row[j]^2 over j, r = rsqrtf(sum / N + EPS), then out_row[j] = x_row[j] * r * weight[j].
    // V2: one warp per row, lanes take columns lane, lane + 32, ...; add the lanes' sums with __shfl_xor_sync.
    // V3: float4 loads where the rows are 16-byte aligned, the row kept in registers between the two loops.
}

extern "C" void rms_norm(const float* x, const float* weight, float* out, int M, int N, int x_row_stride,
                         int out_row_stride) {
    // TODO V1: rms_norm_kernel<<<(M + 255) / 256, 256>>>(x, weight, out, M, N, x_row_stride, out_row_stride);
}

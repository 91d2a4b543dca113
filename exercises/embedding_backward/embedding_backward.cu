// Embedding backward, float32: dweight[v][:] = sum of dout[b][t][:] over the tokens with ids[b][t] == v.
//
// ids (B x T, int64), dout (B x T x C) and dweight (V x C, row-major) are DEVICE pointers; dweight holds
// garbage when you are called, and every row of it must be written: the rows no token uses are 0.
// The same id appears many times (a frequent token): two threads adding into the same element at once with
// a plain `+=` lose one of the additions. See README.md for the steps. Grade with: kcourse grade embedding_backward
#include <cstdint>
#include <cuda_runtime.h>

__global__ void embedding_backward_kernel(const int64_t* ids, const float* dout, float* dweight, int n_tokens, int C) {
    // TODO: one warp per token: token = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32.
    //       Read its id once (an int64_t), then lane l adds elements l, l + 32, ... of row dout + token * C
    //       into row dweight + id * C with atomicAdd: other tokens with the same id add into it at the same time.
}

extern "C" void embedding_backward(const int64_t* ids, const float* dout, float* dweight, int B, int T, int V, int C) {
    // TODO 1: set dweight to zero first (cudaMemsetAsync: all-zero bytes are 0.0f).
    // TODO 2: launch embedding_backward_kernel with 256-thread blocks (8 tokens each), enough for B * T tokens.
}

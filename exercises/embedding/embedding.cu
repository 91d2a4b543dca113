// Embedding forward, float32: out[b][t][:] = weight[ids[b][t]][:].
//
// ids (B x T, int64: torch's index type), weight (V x C, row-major) and out (B x T x C) are DEVICE
// pointers; out holds garbage when you are called. Every id is in [0, V). This is a gather: no arithmetic,
// only memory, so the goal is copying rows at the memory bandwidth. See README.md for the steps.
// Grade with: kcourse grade embedding
#include <cstdint>
#include <cuda_runtime.h>

__global__ void embedding_forward_kernel(const int64_t* ids, const float* weight, float* out, int n_tokens, int C) {
    // TODO: one warp per token: token = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32.
    //       Read its id ONCE (an int64_t, not an int), then lane l copies elements l, l + 32, ... of row
    //       weight + id * C to out + token * C (neighbouring lanes, neighbouring addresses). Tokens past
    //       n_tokens do nothing.
}

extern "C" void embedding_forward(const int64_t* ids, const float* weight, float* out, int B, int T, int V, int C) {
    // TODO: launch embedding_forward_kernel with 256-thread blocks (8 warps: 8 tokens per block) and enough
    //       blocks for B * T tokens.
}

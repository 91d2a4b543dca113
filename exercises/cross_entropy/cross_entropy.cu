// Cross-entropy in CUDA — each row's loss, and the gradient of their mean, for a batch of bfloat16 logits.
//
// logits is an M×V bfloat16 matrix (M rows, e.g. tokens; V classes, e.g. a vocabulary), row-major, row i
// starting at logits + i * logits_row_stride (in elements: it may be more than V, a row slice of a wider
// tensor). targets holds M int64 class indices, or IGNORE_INDEX (-100) for a row that does not count
// (padding). dlogits is M×V bfloat16 with its own row stride; losses has M floats. All are DEVICE pointers.
// With n_valid = the number of rows whose target is not IGNORE_INDEX, write for each row i:
//     lse        = log(sum_j exp(x[j]))            x = row i of logits, in float32 (subtract the row max
//                                                  first: README.md)
//     losses[i]  = lse - x[targets[i]]
//     dlogits[i][j] = (exp(x[j] - lse) - (j == targets[i])) / n_valid
// and for an ignored row: losses[i] = 0 and dlogits[i][j] = 0 for every j.
// This is torch.nn.functional.cross_entropy (mean over the counted rows) and its backward.
// README.md has the details and a ladder of steps from correct to fast.
// Grade with: kcourse grade cross_entropy
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

constexpr long long IGNORE_INDEX = -100;  // PyTorch's ignore_index
constexpr int THREADS = 256;

__device__ int valid_rows;  // n_valid: count_valid_rows writes it, cross_entropy_rows (launched after it) reads it

__global__ void count_valid_rows(const int64_t* targets, int M) {
    // TODO: one block: each thread counts the rows i = threadIdx.x, threadIdx.x + blockDim.x, ... whose
    //   targets[i] != IGNORE_INDEX; add the threads' counts (a __shared__ int partial[THREADS] and a tree, as
    //   in the reduction exercise) and let thread 0 write valid_rows.
}

__global__ void cross_entropy_rows(const __nv_bfloat16* logits, const int64_t* targets, float* losses,
                                   __nv_bfloat16* dlogits, int V, int logits_row_stride, int dlogits_row_stride) {
    // TODO: one block per row:
    //   const __nv_bfloat16* x = logits + (long long)blockIdx.x * logits_row_stride;   (dlogits' row alike)
    //   an ignored row (targets[blockIdx.x] == IGNORE_INDEX): losses[row] = 0, every dlogits column 0; return
    //   forward:  1. the row max: each thread over columns threadIdx.x, threadIdx.x + blockDim.x, ... (in float:
    //               __bfloat162float(x[j])), then a block reduction (__shared__ float partial[THREADS], a tree)
    //             2. sum = sum_j exp(x[j] - max), another block reduction
    //             3. losses[row] = max + logf(sum) - x[target]            (that is lse - x[target])
    //   backward: 4. dlogits[j] = (exp(x[j] - max) / sum - (j == target)) / valid_rows, stored with
    //               __float2bfloat16(...)
}

extern "C" void cross_entropy(const __nv_bfloat16* logits, const int64_t* targets, float* losses,
                              __nv_bfloat16* dlogits, int M, int V, int logits_row_stride, int dlogits_row_stride) {
    // TODO: count_valid_rows<<<1, THREADS>>>(targets, M);
    //       cross_entropy_rows<<<M, THREADS>>>(logits, targets, losses, dlogits, V, logits_row_stride,
    //                                          dlogits_row_stride);
}

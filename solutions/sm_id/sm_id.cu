// Solution — every block writes the SM it runs on (read from the %smid special register through
// inline PTX) and its own index.
//
// The kernel does nothing but two stores per block, so its time is the time the GPU takes to start
// `blocks` blocks. An SM holds at most 32 resident blocks whatever their size, so one warp per block is
// as many blocks in flight as the hardware allows; bigger blocks only add threads that do nothing (at
// 1024 threads, 2 blocks fit on an SM at once).
#include <cuda_runtime.h>

constexpr int THREADS = 32;  // one warp; thread 0 does the stores

// %smid: the SM this thread runs on. `volatile` keeps the compiler from moving or merging the read;
// "%%" is a literal % inside an asm string, and "=r" binds %0 to a 32-bit register output.
__device__ __forceinline__ unsigned this_sm() {
    unsigned id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    return id;
}

__global__ void __launch_bounds__(THREADS) sm_id_kernel(int* __restrict__ sm_ids, int* __restrict__ block_ids) {
    if (threadIdx.x == 0) {
        sm_ids[blockIdx.x] = (int)this_sm();
        block_ids[blockIdx.x] = (int)blockIdx.x;
    }
}

extern "C" void sm_id(int* sm_ids, int* block_ids, int blocks) {
    if (blocks > 0) sm_id_kernel<<<blocks, THREADS>>>(sm_ids, block_ids);
}

// add2.h — given, complete: what add2_ops.cpp needs to know about your launcher.
#pragma once

#include <cuda_runtime.h>

// c = a + b for n x n float32 matrices stored row by row, all three device pointers. The launch goes on
// `stream` (torch's current stream) and returns at once: the kernel runs asynchronously.
void launch_add2(float* c, const float* a, const float* b, int n, cudaStream_t stream);

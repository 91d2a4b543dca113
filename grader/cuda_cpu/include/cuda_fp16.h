// cuda_fp16.h on the CPU: 16-bit floats stored, float arithmetic (kcourse_cuda_cpu_fp16.h).
#pragma once
#include "kcourse_cuda_cpu_fp16.h"

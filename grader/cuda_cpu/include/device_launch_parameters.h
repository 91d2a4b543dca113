// device_launch_parameters.h on the CPU: everything is in kcourse_cuda_cpu.h (forced in with -include).
#pragma once
#include "kcourse_cuda_cpu.h"

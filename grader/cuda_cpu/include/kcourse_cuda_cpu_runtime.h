// The CUDA runtime API on the CPU (included by kcourse_cuda_cpu.h). Device memory is host memory the
// emulator tracks: a kernel argument that points anywhere else is a host pointer, which faults on a GPU.
// Launches run to completion when made, so every stream and event is already in order.
#pragma once

namespace kcuda {
namespace {

void add_device_range(const void* p, size_t size) { emu().device_ranges.emplace_back(static_cast<const char*>(p), size); }

bool drop_device_range(const void* p) {
    auto& ranges = emu().device_ranges;
    for (size_t i = 0; i < ranges.size(); ++i)
        if (ranges[i].first == p) { ranges.erase(ranges.begin() + i); return true; }
    return false;
}

cudaError_t fail_with(cudaError_t error) {
    emu().last_error = error;
    return error;
}

void* device_alloc(size_t size) {  // 256-byte aligned as cudaMalloc's, and exactly `size` long (ASan sees past it)
    void* p = nullptr;
    if (posix_memalign(&p, 256, size ? size : 1) != 0) return nullptr;
    add_device_range(p, size);
    return p;
}

}  // namespace
}  // namespace kcuda

// The grader registers the tensors it passes as device memory (grader/cuda_cpu/__init__.py).
extern "C" __attribute__((visibility("default"))) void kcourse_cuda_cpu_register(void* p, size_t size) {
    kcuda::add_device_range(p, size);
}
extern "C" __attribute__((visibility("default"))) void kcourse_cuda_cpu_forget(void* p) { kcuda::drop_device_range(p); }

// ---- errors ------------------------------------------------------------------------------------------------
inline const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
        case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
        case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
        case cudaErrorNotSupported: return "cudaErrorNotSupported";
        default: return "cudaErrorUnknown";
    }
}
inline const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        case cudaErrorInvalidResourceHandle: return "invalid resource handle";
        case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
        case cudaErrorNotSupported: return "operation not supported";
        default: return "unknown error";
    }
}
inline cudaError_t cudaGetLastError() {
    cudaError_t e = kcuda::emu().last_error;
    kcuda::emu().last_error = cudaSuccess;
    return e;
}
inline cudaError_t cudaPeekAtLastError() { return kcuda::emu().last_error; }

// ---- memory ------------------------------------------------------------------------------------------------
inline cudaError_t cudaMalloc(void** p, size_t size) {
    if (!p) return kcuda::fail_with(cudaErrorInvalidValue);
    *p = kcuda::device_alloc(size);
    return *p ? cudaSuccess : kcuda::fail_with(cudaErrorMemoryAllocation);
}
template <class T> cudaError_t cudaMalloc(T** p, size_t size) { return cudaMalloc(reinterpret_cast<void**>(p), size); }
inline cudaError_t cudaMallocManaged(void** p, size_t size, unsigned = cudaMemAttachGlobal) { return cudaMalloc(p, size); }
template <class T> cudaError_t cudaMallocManaged(T** p, size_t size, unsigned f = cudaMemAttachGlobal) {
    return cudaMallocManaged(reinterpret_cast<void**>(p), size, f);
}
inline cudaError_t cudaMallocAsync(void** p, size_t size, cudaStream_t) { return cudaMalloc(p, size); }
template <class T> cudaError_t cudaMallocAsync(T** p, size_t size, cudaStream_t s) {
    return cudaMallocAsync(reinterpret_cast<void**>(p), size, s);
}
inline cudaError_t cudaMallocPitch(void** p, size_t* pitch, size_t width, size_t height) {
    *pitch = (width + 255) / 256 * 256;
    return cudaMalloc(p, *pitch * height);
}
template <class T> cudaError_t cudaMallocPitch(T** p, size_t* pitch, size_t w, size_t h) {
    return cudaMallocPitch(reinterpret_cast<void**>(p), pitch, w, h);
}
// Pinned host memory is reachable from kernels too (unified addressing): registered as device memory.
inline cudaError_t cudaMallocHost(void** p, size_t size) { return cudaMalloc(p, size); }
template <class T> cudaError_t cudaMallocHost(T** p, size_t size) { return cudaMallocHost(reinterpret_cast<void**>(p), size); }
inline cudaError_t cudaHostAlloc(void** p, size_t size, unsigned) { return cudaMalloc(p, size); }
template <class T> cudaError_t cudaHostAlloc(T** p, size_t size, unsigned f) { return cudaHostAlloc(reinterpret_cast<void**>(p), size, f); }
inline cudaError_t cudaFree(void* p) {
    if (!p) return cudaSuccess;
    if (!kcuda::drop_device_range(p)) return kcuda::fail_with(cudaErrorInvalidValue);
    free(p);
    return cudaSuccess;
}
inline cudaError_t cudaFreeHost(void* p) { return cudaFree(p); }
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t) { return cudaFree(p); }
inline cudaError_t cudaHostRegister(void* p, size_t size, unsigned) { kcuda::add_device_range(p, size); return cudaSuccess; }
inline cudaError_t cudaHostUnregister(void* p) {
    return kcuda::drop_device_range(p) ? cudaSuccess : kcuda::fail_with(cudaErrorInvalidValue);
}
inline cudaError_t cudaHostGetDevicePointer(void** d, void* h, unsigned) { *d = h; return cudaSuccess; }
inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind) {
    if (count && (!dst || !src)) return kcuda::fail_with(cudaErrorInvalidValue);
    if (count) memmove(dst, src, count);
    return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t = nullptr) {
    return cudaMemcpy(dst, src, count, kind);
}
inline cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                                cudaMemcpyKind) {
    for (size_t r = 0; r < height; ++r)
        memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
    return cudaSuccess;
}
inline cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                     size_t height, cudaMemcpyKind kind, cudaStream_t = nullptr) {
    return cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind);
}
inline cudaError_t cudaMemset(void* p, int value, size_t count) {
    if (count && !p) return kcuda::fail_with(cudaErrorInvalidValue);
    memset(p, value, count);
    return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* p, int value, size_t count, cudaStream_t = nullptr) { return cudaMemset(p, value, count); }
template <class T> cudaError_t cudaMemcpyToSymbol(T& symbol, const void* src, size_t count, size_t offset = 0,
                                                  cudaMemcpyKind = cudaMemcpyHostToDevice) {
    memcpy(reinterpret_cast<char*>(&symbol) + offset, src, count);
    return cudaSuccess;
}
template <class T> cudaError_t cudaMemcpyToSymbolAsync(T& symbol, const void* src, size_t count, size_t offset = 0,
                                                       cudaMemcpyKind kind = cudaMemcpyHostToDevice, cudaStream_t = nullptr) {
    return cudaMemcpyToSymbol(symbol, src, count, offset, kind);
}
template <class T> cudaError_t cudaMemcpyFromSymbol(void* dst, const T& symbol, size_t count, size_t offset = 0,
                                                    cudaMemcpyKind = cudaMemcpyDeviceToHost) {
    memcpy(dst, reinterpret_cast<const char*>(&symbol) + offset, count);
    return cudaSuccess;
}
template <class T> cudaError_t cudaGetSymbolAddress(void** p, T& symbol) {
    *p = &symbol;
    kcuda::add_device_range(&symbol, sizeof(T));  // a __device__ variable: device memory a kernel may be given
    return cudaSuccess;
}
inline cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
    *free_bytes = 80ull << 30;
    *total = 80ull << 30;
    return cudaSuccess;
}

// ---- streams and events: everything already ran, in order ----------------------------------------------------
inline cudaError_t cudaStreamCreate(cudaStream_t* s) { *s = new CUstream_st{0}; return cudaSuccess; }
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) { *s = new CUstream_st{(int)flags}; return cudaSuccess; }
inline cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned flags, int) { return cudaStreamCreateWithFlags(s, flags); }
inline cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) { *least = 0; *greatest = -5; return cudaSuccess; }
inline cudaError_t cudaStreamDestroy(cudaStream_t s) { delete s; return cudaSuccess; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned = 0) { return cudaSuccess; }
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { *e = new CUevent_st{{}, false}; return cudaSuccess; }
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t = nullptr) {
    e->at = std::chrono::steady_clock::now();
    e->recorded = true;
    return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    if (!start->recorded || !end->recorded) return kcuda::fail_with(cudaErrorInvalidResourceHandle);
    *ms = std::chrono::duration<float, std::milli>(end->at - start->at).count();
    return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
inline cudaError_t cudaDeviceSynchronize() { return kcuda::emu().last_error; }
inline cudaError_t cudaThreadSynchronize() { return cudaDeviceSynchronize(); }
inline cudaError_t cudaDeviceReset() { return cudaSuccess; }

// ---- the device: an H100's shape, so grid sizes computed from it look as they would on one ------------------
inline cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
inline cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
inline cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : kcuda::fail_with(cudaErrorInvalidDevice); }
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
    if (d != 0) return kcuda::fail_with(cudaErrorInvalidDevice);
    *p = cudaDeviceProp{};
    snprintf(p->name, sizeof p->name, "kcourse CPU emulator (CUDA semantics)");
    p->totalGlobalMem = 80ull << 30;
    p->sharedMemPerBlock = 48 * 1024;
    p->sharedMemPerBlockOptin = 227 * 1024;
    p->sharedMemPerMultiprocessor = 228 * 1024;
    p->totalConstMem = 64 * 1024;
    p->regsPerBlock = p->regsPerMultiprocessor = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647; p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    p->clockRate = 1980000; p->memoryClockRate = 2619000; p->memoryBusWidth = 5120;
    p->l2CacheSize = 50 * 1024 * 1024;
    p->major = 9; p->minor = 0;
    p->multiProcessorCount = 132;
    p->maxThreadsPerMultiProcessor = 2048;
    p->maxBlocksPerMultiProcessor = 32;
    p->concurrentKernels = p->unifiedAddressing = p->managedMemory = p->canMapHostMemory = 1;
    p->asyncEngineCount = 2;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int d) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) return cudaErrorInvalidDevice;
    switch (attr) {
        case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
        case cudaDevAttrMaxBlockDimX: *value = p.maxThreadsDim[0]; break;
        case cudaDevAttrMaxGridDimX: *value = p.maxGridSize[0]; break;
        case cudaDevAttrMaxSharedMemoryPerBlock: *value = (int)p.sharedMemPerBlock; break;
        case cudaDevAttrWarpSize: *value = 32; break;
        case cudaDevAttrClockRate: *value = p.clockRate; break;
        case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
        case cudaDevAttrMemoryClockRate: *value = p.memoryClockRate; break;
        case cudaDevAttrGlobalMemoryBusWidth: *value = p.memoryBusWidth; break;
        case cudaDevAttrL2CacheSize: *value = p.l2CacheSize; break;
        case cudaDevAttrMaxThreadsPerMultiProcessor: *value = p.maxThreadsPerMultiProcessor; break;
        case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
        case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
        case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = (int)p.sharedMemPerMultiprocessor; break;
        case cudaDevAttrMaxRegistersPerMultiprocessor: *value = p.regsPerMultiprocessor; break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)p.sharedMemPerBlockOptin; break;
        default: return kcuda::fail_with(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}
inline cudaError_t cudaDeviceSetLimit(cudaLimit, size_t) { return cudaSuccess; }
inline cudaError_t cudaDeviceGetLimit(size_t* v, cudaLimit) { *v = 1 << 20; return cudaSuccess; }
inline cudaError_t cudaDeviceSetCacheConfig(cudaFuncCache) { return cudaSuccess; }
template <class F> cudaError_t cudaFuncSetCacheConfig(F*, cudaFuncCache) { return cudaSuccess; }
template <class F> cudaError_t cudaFuncSetAttribute(F* k, cudaFuncAttribute attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
    if (value < 0 || value > 227 * 1024) return kcuda::fail_with(cudaErrorInvalidValue);
    auto& limits = kcuda::emu().shared_limits;
    const void* key = reinterpret_cast<const void*>(k);
    for (auto& [kernel, limit] : limits) if (kernel == key) { limit = value; return cudaSuccess; }
    limits.emplace_back(key, value);
    return cudaSuccess;
}
template <class F> cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, F* k) {
    *a = cudaFuncAttributes{};
    a->maxThreadsPerBlock = 1024;
    a->numRegs = 32;
    a->maxDynamicSharedSizeBytes = kcuda::dynamic_shared_limit(reinterpret_cast<const void*>(k));
    return cudaSuccess;
}
template <class F> cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, F, int block, size_t shared) {
    int by_threads = block > 0 ? 2048 / block : 0, by_shared = shared ? (int)((228 * 1024) / shared) : 32;
    *n = std::min(32, std::min(by_threads, by_shared));
    return cudaSuccess;
}
template <class F> cudaError_t cudaOccupancyMaxPotentialBlockSize(int* grid, int* block, F, size_t = 0, int limit = 0) {
    *block = limit > 0 && limit < 1024 ? limit : 1024;
    *grid = 132 * (2048 / *block);
    return cudaSuccess;
}

// kcourse's CUDA-on-the-CPU header: a learner's .cu file, compiled by the host C++ compiler with this header
// forced in (-include) and its launches rewritten (grader/cuda_cpu/__init__.py: `k<<<g, b>>>(args)` becomes
// `k | ::kcuda::Config(g, b)(args)`), runs its kernels on the CPU with CUDA's semantics:
//
//  - every thread of a block is a fiber on one OS thread; a thread runs until it reaches a barrier
//    (__syncthreads, a warp intrinsic, a failed atomicCAS), then the next one runs. Between barriers the
//    threads run in a seeded random order (KCOURSE_CUDA_CPU_SEED), so a missing __syncthreads() reads
//    stale shared memory on some seed, as a race would on a GPU;
//  - warps of 32 lanes: __shfl_*_sync, __ballot_sync, __any/__all_sync, __syncwarp wait for every lane
//    named in the mask, as the hardware does since Volta;
//  - __shared__ memory is static per block (blocks run one after another), dynamic shared memory is a fresh
//    buffer per block filled with NaN bytes;
//  - atomics, the math intrinsics, and the runtime API the host-side exercises use (cudaMalloc, copies,
//    streams and events run in order, error codes and cudaGetLastError).
//
// It is built with AddressSanitizer: a read or write past an allocation stops with the learner's file:line,
// and the death callback below names the kernel, block and thread. Why our own header and not HIP-CPU:
// HIP-CPU has AMD's 64-lane wavefronts and HIP's API (a hipify pass first) and needs TBB.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include <algorithm>
#include <cxxabi.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#include <sanitizer/asan_interface.h>
#define KCUDA_ASAN 1
#endif
// The emulator's own code is not instrumented: AddressSanitizer checks the learner's (and every check is a call to
// the preemption hooks at the end of this file, which must not be reentered from here).
#ifdef KCUDA_ASAN
#define KCUDA_UNHOOKED __attribute__((no_sanitize_address))
#else
#define KCUDA_UNHOOKED
#endif
#if defined(__x86_64__) && !defined(KCUDA_UCONTEXT)
#define KCUDA_ASM_SWITCH 1  // fibers switch in a few instructions (below); ucontext elsewhere (arm64: not yet verified)
#endif

// ---- the CUDA C++ keywords --------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static  // blocks run one after another on one OS thread: a static is the block's
#define __grid_constant__
#define KCOURSE_CUDA_CPU 1

// ---- vector types -----------------------------------------------------------------------------------------
#define KCUDA_VEC2(T, N, A) struct alignas(A) N##2 { T x, y; }; \
    inline N##2 make_##N##2(T x, T y) { return N##2{x, y}; }
#define KCUDA_VEC3(T, N) struct N##3 { T x, y, z; }; \
    inline N##3 make_##N##3(T x, T y, T z) { return N##3{x, y, z}; }
#define KCUDA_VEC4(T, N, A) struct alignas(A) N##4 { T x, y, z, w; }; \
    inline N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; }
#define KCUDA_VECS(T, N, S) KCUDA_VEC2(T, N, 2 * S) KCUDA_VEC3(T, N) KCUDA_VEC4(T, N, (4 * S > 16 ? 16 : 4 * S))
KCUDA_VECS(float, float, 4)
KCUDA_VECS(double, double, 8)
KCUDA_VECS(int, int, 4)
KCUDA_VECS(unsigned int, uint, 4)
KCUDA_VECS(signed char, char, 1)
KCUDA_VECS(unsigned char, uchar, 1)
KCUDA_VECS(short, short, 2)
KCUDA_VECS(unsigned short, ushort, 2)
KCUDA_VECS(long long, longlong, 8)
KCUDA_VECS(unsigned long long, ulonglong, 8)
struct float1 { float x; };
struct int1 { int x; };

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

static constexpr int warpSize = 32;

// ---- the runtime's types ----------------------------------------------------------------------------------
enum cudaError_t {
    cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9, cudaErrorInvalidDevice = 101, cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600, cudaErrorIllegalAddress = 700, cudaErrorLaunchOutOfResources = 701,
    cudaErrorLaunchFailure = 719, cudaErrorNotSupported = 801, cudaErrorUnknown = 999,
};
typedef cudaError_t cudaError;
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4,
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8, cudaFuncAttributePreferredSharedMemoryCarveout = 9 };
enum cudaFuncCache { cudaFuncCachePreferNone = 0, cudaFuncCachePreferShared = 1, cudaFuncCachePreferL1 = 2, cudaFuncCachePreferEqual = 3 };
enum cudaDeviceAttr {
    cudaDevAttrMaxThreadsPerBlock = 1, cudaDevAttrMaxBlockDimX = 2, cudaDevAttrMaxGridDimX = 5,
    cudaDevAttrMaxSharedMemoryPerBlock = 8, cudaDevAttrWarpSize = 10, cudaDevAttrClockRate = 13,
    cudaDevAttrMultiProcessorCount = 16, cudaDevAttrMemoryClockRate = 36, cudaDevAttrGlobalMemoryBusWidth = 37,
    cudaDevAttrL2CacheSize = 38, cudaDevAttrMaxThreadsPerMultiProcessor = 39, cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76, cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81,
    cudaDevAttrMaxRegistersPerMultiprocessor = 82, cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};
enum cudaLimit { cudaLimitStackSize = 0, cudaLimitPrintfFifoSize = 1, cudaLimitMallocHeapSize = 2 };
#define cudaStreamDefault 0x0
#define cudaStreamNonBlocking 0x1
#define cudaEventDefault 0x0
#define cudaEventBlockingSync 0x1
#define cudaEventDisableTiming 0x2
#define cudaHostAllocDefault 0x0
#define cudaHostAllocPortable 0x1
#define cudaHostAllocMapped 0x2
#define cudaHostAllocWriteCombined 0x4
#define cudaHostRegisterDefault 0x0
#define cudaMemAttachGlobal 0x1
struct CUstream_st { int flags; };
struct CUevent_st { std::chrono::steady_clock::time_point at; bool recorded; };
typedef CUstream_st* cudaStream_t;
typedef CUevent_st* cudaEvent_t;
#define cudaStreamPerThread ((cudaStream_t)0x2)
#define cudaStreamLegacy ((cudaStream_t)0x1)

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem, sharedMemPerBlock, sharedMemPerBlockOptin, sharedMemPerMultiprocessor, totalConstMem;
    int regsPerBlock, regsPerMultiprocessor, warpSize, maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3];
    int clockRate, memoryClockRate, memoryBusWidth, l2CacheSize, persistingL2CacheMaxSize;
    int major, minor, multiProcessorCount, maxThreadsPerMultiProcessor, maxBlocksPerMultiProcessor;
    int concurrentKernels, asyncEngineCount, unifiedAddressing, managedMemory, canMapHostMemory;
};
struct cudaFuncAttributes {
    size_t sharedSizeBytes, constSizeBytes, localSizeBytes;
    int maxThreadsPerBlock, numRegs, ptxVersion, binaryVersion, maxDynamicSharedSizeBytes;
};

// ---- the emulator -----------------------------------------------------------------------------------------
// Everything below has internal linkage (an unnamed namespace): the learner's library and the solution's,
// loaded in one process, each keep their own scheduler.
namespace kcuda {
namespace {

enum State { kReady, kAtBlockBarrier, kAtWarpOp, kDone };
enum WarpOp { kSync, kShfl, kShflUp, kShflDown, kShflXor, kBallot, kAny, kAll, kReduceAdd, kReduceMin, kReduceMax,
              kActiveMask };
constexpr size_t kStackBytes = 256 * 1024;

struct Fiber;
struct Thread {
    uint3 idx;
    int linear = 0;
    State state = kReady;
    Fiber* fiber = nullptr;
    // a warp intrinsic or block barrier waiting: what it asked, then what it got
    WarpOp op = kSync;
    unsigned mask = 0;
    uint64_t value = 0;
    int arg = 0, width = 32, predicate = 0;
    uint64_t result = 0;
    uint64_t shared_high = 0;  // __cvta_generic_to_shared's
    const void* fragments = nullptr;  // what this lane hands its warp at a tensor-core instruction (kcuda::in_warp)
};

struct Fiber {
    struct Context {
        void* sp = nullptr;  // the stack pointer kcuda_switch saved
#ifndef KCUDA_ASM_SWITCH
        ucontext_t uc;
#endif
    } context;
    char* stack = nullptr;
    Thread* thread = nullptr;
    void* fake_stack = nullptr;
};

// The scheduler's state is read through plain pointers and counts: the emulator's code is not instrumented, but a
// std::vector method it calls is (GCC does not inline an instrumented function into one that is not), and every
// access of one would go through the preemption hooks.
struct Launch {  // the launch running now
    dim3 grid, block;
    uint3 block_idx;
    std::vector<Thread> threads;
    std::vector<Thread*> ready_storage;
    std::vector<unsigned> waiting_storage;
    Thread* thread = nullptr;   // threads.data(), n of them
    Thread** ready = nullptr;   // ready_storage.data(): the threads that may run now, n_ready of them
    unsigned* at_warp_op = nullptr;  // waiting_storage.data(): per warp, its lanes that wait at a warp intrinsic
    int n = 0, n_ready = 0;
    int done = 0, at_barrier = 0;  // the block's threads that returned; that wait at __syncthreads()
    void (*body)(void*) = nullptr;
    void* closure = nullptr;
    char* dynamic_shared = nullptr;
    const char* kernel = "a kernel";
    unsigned sm = 0;  // the SM this block "runs on" (%smid): drawn per block, as a GPU's scheduler spreads them
};

struct Emulator {
    std::vector<Fiber*> fibers;  // every fiber made
    Fiber** free_fibers = nullptr;  // those without a thread now, n_free of them (room for every fiber)
    int n_free = 0;
    Launch* launch = nullptr;
    Thread* current = nullptr;
    Fiber::Context scheduler;  // the stack that called the kernel: a block starts from it and ends on it
    void* scheduler_fake_stack = nullptr;
    const void* main_stack_bottom = nullptr;
    size_t main_stack_size = 0;
    bool from_main = false;  // the fiber switched to now comes from that stack (its bounds are noted then)
    uint64_t rng = 0;
    cudaError_t last_error = cudaSuccess;
    std::vector<std::pair<const char*, size_t>> device_ranges;  // [start, size): memory a kernel may touch
    std::vector<std::pair<const void*, int>> shared_limits;     // cudaFuncSetAttribute's dynamic shared maximum
    bool death_callback_set = false;
    pthread_t runner{};  // the OS thread that runs the blocks (run_grid's caller)
    char kernel_name[512] = "a kernel";
};

Emulator g_emulator;
__attribute__((always_inline)) inline Emulator& emu() { return g_emulator; }  // (touches no memory: inlined anywhere)

// ---- fibers: a context switch is a few register moves on x86-64 (ucontext elsewhere) ------------------------
// Neither _longjmp nor swapcontext: AddressSanitizer intercepts _longjmp and clears a stack's shadow on every
// jump (12x slower), and swapcontext makes a system call a switch.
#if defined(KCUDA_ASM_SWITCH)
// kcuda_switch(&save, to): push the callee-saved registers, store the stack pointer in *save, load `to`, pop.
extern "C" void kcuda_switch(void** save, void* to) asm("kcuda_switch");
asm(".text\nkcuda_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n  ret\n");
constexpr int kSavedWords = 6;  // then the return address
#endif

KCUDA_UNHOOKED inline void start_switch(void** save, const void* bottom, size_t size) {
#ifdef KCUDA_ASAN
    __sanitizer_start_switch_fiber(save, bottom, size);
#else
    (void)save; (void)bottom; (void)size;
#endif
}
KCUDA_UNHOOKED inline void finish_switch(void* save, const void** bottom, size_t* size) {
#ifdef KCUDA_ASAN
    __sanitizer_finish_switch_fiber(save, bottom, size);
#else
    (void)save; (void)bottom; (void)size;
#endif
}

KCUDA_UNHOOKED inline void switch_to(Fiber::Context* save, Fiber::Context* to) {
#ifdef KCUDA_ASM_SWITCH
    kcuda_switch(&save->sp, to->sp);
#else
    swapcontext(&save->uc, &to->uc);
#endif
}

// Preemption: with AddressSanitizer every load and store of the learner's code goes through a hook (at the end of
// this file), which now and then lets another thread of the block run first (seeded), so a read-modify-write that
// is not atomic loses updates as it does on a GPU. The switching code itself is not instrumented (and calls nothing
// that is: std::vector's methods are, so the scheduler reads plain arrays).
Thread* g_running = nullptr;  // the thread whose fiber runs now; null on the scheduler's stack and in the scheduler
uintptr_t g_stack = 0;  // the start of its fiber's stack (0 with no fiber running): accesses there are never switched out
// The kernel's access whose bytes chance() (below) reads now, "read" or "write" (null otherwise), and its size. A
// fault there is the emulator's own read of them (an unmapped address), which AddressSanitizer calls a READ whatever
// the kernel's access was: the death callback says which it was.
// (volatile: the stores around that read are kept, and in order, for the death callback to see)
const char* volatile g_touching = nullptr;
volatile size_t g_touching_size = 0;
// > 0 inside the emulator's own indivisible operations (an atomic); volatile, or the compiler drops the ++/-- pair
// around an atomic's load and store before AddressSanitizer's checks (the hooks' calls) are put between them
volatile int g_indivisible = 0;
// the addresses the last atomics wrote: a thread switched out at a check does not put back bytes an atomic wrote
// meanwhile (a plain load before an atomicCAS loop is no race to punish)
const void* g_atomic_ring[64];
volatile unsigned long g_atomics = 0;
inline void note_atomic(const void* p) { g_atomic_ring[g_atomics & 63] = p; g_atomics = g_atomics + 1; }
uint64_t g_preempt_rng = 0;
// the loads and the stores until the next chance of a switch (preemption_gap draws them; the hooks count down)
long g_loads_left = 1, g_stores_left = 1;
constexpr unsigned kLoadOdds = 64, kStoreOdds = 8;  // a load: 1 chance in 64; a store (rarer): 1 in 8
KCUDA_UNHOOKED long preemption_gap(unsigned odds) {  // from 1 to 2 odds - 1, seeded: one access in `odds` on average
    uint64_t& r = g_preempt_rng;  // seeded per block (run_grid)
    r ^= r << 13; r ^= r >> 7; r ^= r << 17;
    return 1 + (long)(((unsigned __int128)r * (2 * odds - 1)) >> 64);
}

void fiber_main();

Fiber* new_fiber() {  // its first switch lands at fiber_main's first line, on its own stack
    Fiber* f = new Fiber();
    void* memory = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (memory == MAP_FAILED) { fprintf(stderr, "kcourse-emu: out of memory for a thread's stack\n"); abort(); }
    mprotect(memory, 4096, PROT_NONE);  // a guard page: a stack overflow faults instead of writing another's stack
    f->stack = static_cast<char*>(memory);
    Emulator& e = emu();
    e.fibers.push_back(f);
    e.free_fibers = static_cast<Fiber**>(realloc(e.free_fibers, e.fibers.size() * sizeof(Fiber*)));
    if (!e.free_fibers) { fprintf(stderr, "kcourse-emu: out of memory\n"); abort(); }
#ifdef KCUDA_ASM_SWITCH
    void** top = reinterpret_cast<void**>(f->stack + kStackBytes - 64);  // 16-byte aligned
    top[-1] = nullptr;                                  // where fiber_main's return address would be
    top[-2] = reinterpret_cast<void*>(&fiber_main);     // kcuda_switch's `ret` goes here
    f->context.sp = top - 2 - kSavedWords;              // the registers it pops (zeros)
    memset(f->context.sp, 0, kSavedWords * sizeof(void*));
#else
    getcontext(&f->context.uc);
    f->context.uc.uc_stack.ss_sp = f->stack + 4096;
    f->context.uc.uc_stack.ss_size = kStackBytes - 4096;
    f->context.uc.uc_link = nullptr;
    makecontext(&f->context.uc, fiber_main, 0);
#endif
    return f;
}

// ---- reports: what the learner reads when a kernel stops ----------------------------------------------------
// `thread_known`: e.current is the thread whose code stopped. Else only the kernel and block are named.
void where(FILE* out, bool thread_known = true) {
    Emulator& e = emu();
    if (!e.launch || !e.current) return;
    uint3 b = e.launch->block_idx, t = e.current->idx;
    if (thread_known)
        fprintf(out, "kcourse-emu: in kernel %s, block (%u, %u, %u), thread (%u, %u, %u)\n", e.kernel_name,
                b.x, b.y, b.z, t.x, t.y, t.z);
    else
        fprintf(out, "kcourse-emu: in kernel %s, block (%u, %u, %u), thread unknown (it stopped between two of the "
                "block's threads, or on another OS thread)\n", e.kernel_name, b.x, b.y, b.z);
}

// AddressSanitizer stopped the process. The thread whose fiber runs (g_running) is the one that faulted only on the
// OS thread that runs the blocks; g_running is null while the emulator's scheduler runs between two threads, where
// e.current may already name the next one.
void on_death() {
    Emulator& e = emu();
    if (g_touching) fprintf(stderr, "kcourse-emu: access: %s of %zu bytes\n", g_touching, (size_t)g_touching_size);
    where(stderr, g_running && g_running == e.current && pthread_equal(pthread_self(), e.runner));
    fflush(stderr);
}

[[noreturn]] void fail(const char* what) {
    fprintf(stderr, "kcourse-emu: %s\n", what);
    where(stderr);
    fflush(stdout);
    fflush(stderr);
    abort();
}

void name_kernel(const void* k) {
    Emulator& e = emu();
    Dl_info info;
    snprintf(e.kernel_name, sizeof e.kernel_name, "a kernel");
    if (!dladdr(k, &info) || !info.dli_sname) return;
    int status = 0;
    char* plain = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
    snprintf(e.kernel_name, sizeof e.kernel_name, "%s", status == 0 && plain ? plain : info.dli_sname);
    free(plain);
}

// ---- the seeded schedule -----------------------------------------------------------------------------------
KCUDA_UNHOOKED uint64_t next_random() {
    Emulator& e = emu();
    if (e.rng == 0) {
        const char* seed = getenv("KCOURSE_CUDA_CPU_SEED");
        e.rng = (seed ? strtoull(seed, nullptr, 10) : 1) * 0x9E3779B97F4A7C15ull + 1;
    }
    e.rng ^= e.rng << 13; e.rng ^= e.rng >> 7; e.rng ^= e.rng << 17;
    return e.rng;
}


// ---- barriers ------------------------------------------------------------------------------------------------
KCUDA_UNHOOKED inline Thread& me() {
    Emulator& e = emu();
    if (!e.current) fail("a device function (__syncthreads, a warp intrinsic, threadIdx) was called outside a kernel");
    return *e.current;
}

KCUDA_UNHOOKED unsigned lanes_of_warp(const Launch& l, int warp) {  // the lanes that exist (the last warp of a block may be short)
    int first = warp * 32, count = l.n - first < 32 ? l.n - first : 32;
    return count >= 32 ? 0xffffffffu : ((1u << count) - 1);
}

KCUDA_UNHOOKED uint64_t warp_result(const Thread& t, Thread* const* lanes, unsigned waiting) {
    int lane = t.linear & 31, w = t.width, base = lane & ~(w - 1), src = lane;
    switch (t.op) {
        case kShfl: src = base + (t.arg & (w - 1)); break;
        case kShflUp: src = (lane - base) >= t.arg ? lane - t.arg : lane; break;
        case kShflDown: src = (lane - base) + t.arg < w ? lane + t.arg : lane; break;
        case kShflXor: src = lane ^ t.arg; if (src >= base + w) src = lane; break;
        case kSync: return 0;
        default: {
            uint64_t ballot = 0, sum = 0; int64_t lo = INT64_MAX, hi = INT64_MIN;
            for (int i = 0; i < 32; ++i) {
                if (!((waiting & t.mask) >> i & 1u)) continue;
                ballot |= (uint64_t)(lanes[i]->predicate != 0) << i;
                int64_t v = (int64_t)(int32_t)lanes[i]->value;
                sum += (uint32_t)lanes[i]->value; lo = v < lo ? v : lo; hi = v > hi ? v : hi;
            }
            if (t.op == kBallot) return ballot;
            if (t.op == kAny) return ballot != 0;
            if (t.op == kAll) return ballot == (uint64_t)(waiting & t.mask);
            if (t.op == kReduceAdd) return (uint32_t)sum;
            return (uint64_t)(uint32_t)(t.op == kReduceMin ? lo : hi);
        }
    }
    if (src < 0 || src > 31 || !lanes[src] || !((waiting >> src) & 1u)) return t.value;  // an inactive source
    return lanes[src]->value;
}

// A group of a warp's lanes waiting at an intrinsic with the same mask goes on when every lane of the mask (that
// exists) waits with it: lanes at other intrinsics, with other masks, are other calls (a half-warp shuffle, then a
// full one). __activemask() goes on last, when nothing else can: it returns the lanes that reached it.
KCUDA_UNHOOKED bool release_warp(Launch& l, int warp) {
    Thread* lanes[32] = {};
    unsigned waiting = 0, active = 0, exists = lanes_of_warp(l, warp), seen = 0;
    for (int i = 0; i < 32; ++i) {
        if (!((exists >> i) & 1u)) continue;
        lanes[i] = &l.thread[warp * 32 + i];
        if (lanes[i]->state == kAtWarpOp) (lanes[i]->op == kActiveMask ? active : waiting) |= 1u << i;
    }
    bool released = false;
    for (int i = 0; i < 32; ++i) {
        if (!((waiting >> i) & 1u) || ((seen >> i) & 1u)) continue;
        unsigned mask = lanes[i]->mask & exists, group = 0;
        for (int j = 0; j < 32; ++j)
            if (((waiting >> j) & 1u) && lanes[j]->mask == lanes[i]->mask) group |= 1u << j;
        seen |= group;
        if ((mask & ~group) != 0) continue;  // a lane of the mask is elsewhere: not yet
        for (int j = 0; j < 32; ++j)
            if ((group >> j) & 1u) lanes[j]->result = warp_result(*lanes[j], lanes, group);
        for (int j = 0; j < 32; ++j)
            if ((group >> j) & 1u) lanes[j]->state = kReady;
        l.at_warp_op[warp] &= ~group;
        released = true;
    }
    if (released || !active) return released;
    for (int j = 0; j < 32; ++j)  // __activemask() only once no lane of the warp can still arrive
        if (lanes[j] && lanes[j]->state == kReady) return false;
    for (int j = 0; j < 32; ++j)
        if ((active >> j) & 1u) { lanes[j]->result = active; lanes[j]->state = kReady; }
    l.at_warp_op[warp] &= ~active;
    return true;
}

// Why the block cannot go on, if it cannot: a lane named in a mask has exited, or threads wait at barriers
// that can never all be reached.
void explain_deadlock(Launch& l) {
    for (int k = 0; k < l.n; ++k) {
        Thread& t = l.thread[k];
        if (t.state != kAtWarpOp) continue;
        int warp = t.linear / 32;
        for (int i = 0; i < 32; ++i) {
            if (!((t.mask & lanes_of_warp(l, warp)) >> i & 1u)) continue;
            Thread& other = l.thread[warp * 32 + i];
            emu().current = &t;
            if (other.state == kDone)
                fail("a warp intrinsic (__shfl_*_sync, __ballot_sync, __syncwarp ...) waits for a lane of its mask "
                     "that has already returned: every lane the mask names must reach the intrinsic (use the mask "
                     "__ballot_sync gives, or keep every lane in the loop)");
            if (other.state == kAtBlockBarrier)
                fail("deadlock: lanes of one warp wait at a warp intrinsic while others of its mask wait at "
                     "__syncthreads(): every lane the mask names must reach the same intrinsic");
        }
    }
    fail("deadlock: the threads of this block wait at barriers they cannot all reach");
}

KCUDA_UNHOOKED void release_block(Launch& l) {
    int count = 0, all = 1, any = 0;
    for (int k = 0; k < l.n; ++k) {
        const Thread& t = l.thread[k];
        if (t.state == kAtBlockBarrier) { count += t.predicate != 0; all &= t.predicate != 0; any |= t.predicate != 0; }
    }
    for (int k = 0; k < l.n; ++k) {
        Thread& t = l.thread[k];
        if (t.state != kAtBlockBarrier) continue;
        t.result = t.op == kAll ? all : t.op == kAny ? any : count;
        t.state = kReady;
    }
    l.at_barrier = 0;
}

// Nothing can run: release what waits at a warp intrinsic or at __syncthreads(), or say why the block is stuck.
KCUDA_UNHOOKED void release_waiting(Launch& l) {
    bool released = false;
    for (int w = 0; w * 32 < l.n; ++w) released |= release_warp(l, w);
    if (!released && l.at_barrier + l.done == l.n) { release_block(l); released = true; }
    if (!released) explain_deadlock(l);
    for (int k = 0; k < l.n; ++k) if (l.thread[k].state == kReady) l.ready[l.n_ready++] = &l.thread[k];
}

// ---- the scheduler: each step runs a thread drawn at random from those ready, until it returns, waits, or is
// switched out. It runs on the stack of the fiber that stops (a switch goes from fiber to fiber, not through the
// caller's stack), and a fiber whose thread returned runs a thread that has not started yet without a switch.
KCUDA_UNHOOKED Thread* pick(Launch& l) {  // the next thread to run; null when the block is done
    while (l.n_ready == 0) {
        if (l.done == l.n) return nullptr;
        release_waiting(l);
    }
    size_t i = (size_t)(((unsigned __int128)next_random() * (unsigned)l.n_ready) >> 64);
    Thread* t = l.ready[i];
    l.ready[i] = l.ready[--l.n_ready];
    return t;
}

KCUDA_UNHOOKED Fiber* fiber_for(Thread* t) {
    if (!t->fiber) {
        Emulator& e = emu();
        Fiber* f = e.n_free ? e.free_fibers[--e.n_free] : new_fiber();
        f->thread = t;
        t->fiber = f;
    }
    return t->fiber;
}

KCUDA_UNHOOKED inline void arrived(Fiber* f) {  // the first thing a fiber does when it runs again
    Emulator& e = emu();
    if (e.from_main) {
        e.from_main = false;
        finish_switch(f->fake_stack, &e.main_stack_bottom, &e.main_stack_size);
    } else {
        finish_switch(f->fake_stack, nullptr, nullptr);
    }
}

// The thread of fiber f stops (its state says why: kReady when switched out, a wait, kDone when it returned); the
// next one runs. Returns when f runs again, with f->thread the thread it runs (another one if this one returned).
KCUDA_UNHOOKED void reschedule(Fiber* f) {
    Emulator& e = emu();
    Launch& l = *e.launch;
    Thread* t = f->thread;
    g_running = nullptr;
    g_stack = 0;
    if (t->state == kReady) l.ready[l.n_ready++] = t;
    else if (t->state == kDone) { ++l.done; t->fiber = nullptr; }
    Thread* next = pick(l);
    if (next == t) { e.current = t; g_running = t; g_stack = (uintptr_t)f->stack; return; }
    if (t->state == kDone) {
        if (next && !next->fiber) {  // a thread that has not started: this fiber runs it
            f->thread = next;
            next->fiber = f;
            e.current = next;
            g_running = next;
            g_stack = (uintptr_t)f->stack;
            return;
        }
        f->thread = nullptr;
        e.free_fibers[e.n_free++] = f;
    }
    e.current = next;
    if (next) {
        Fiber* to = fiber_for(next);
        start_switch(&f->fake_stack, to->stack, kStackBytes);
        switch_to(&f->context, &to->context);
    } else {  // the block is done
        start_switch(&f->fake_stack, e.main_stack_bottom, e.main_stack_size);
        switch_to(&f->context, &e.scheduler);
    }
    arrived(f);
    g_running = f->thread;
    g_stack = (uintptr_t)f->stack;
}

KCUDA_UNHOOKED void fiber_main() {  // a fiber's life: run the thread it is given, then the next one it is given
    Emulator& e = emu();
    Fiber* f = e.current->fiber;
    arrived(f);
    g_running = f->thread;
    g_stack = (uintptr_t)f->stack;
    for (;;) {
        Launch* l = e.launch;
        l->body(l->closure);  // runs as e.current, the thread this fiber was given
        f->thread->state = kDone;
        reschedule(f);
    }
}

KCUDA_UNHOOKED void wait_at(State s) {
    Thread& t = me();
    Launch& l = *emu().launch;
    t.state = s;
    if (s == kAtBlockBarrier && ++l.at_barrier + l.done == l.n) {  // the last one there: the block goes on
        release_block(l);
        for (int k = 0; k < l.n; ++k)
            if (l.thread[k].state == kReady && &l.thread[k] != &t) l.ready[l.n_ready++] = &l.thread[k];
    }
    reschedule(t.fiber);
}

// A lane arriving at a warp intrinsic: when it completes its group (every lane of its mask waits, with that mask)
// the group goes on at once, this lane without a switch and the others back among the ready; otherwise it waits.
// __activemask() waits for release_waiting (nothing else can run).
KCUDA_UNHOOKED void wait_at_warp_op() {
    Thread& t = me();
    Launch& l = *emu().launch;
    ++g_indivisible;  // the emulator's own bookkeeping (the ready list above all) is never switched out midway
    t.state = kAtWarpOp;
    int warp = t.linear / 32, first = warp * 32;
    unsigned exists = lanes_of_warp(l, warp), mask = t.mask & exists;
    unsigned& waiting = l.at_warp_op[warp];
    waiting |= 1u << (t.linear & 31);
    if (t.op != kActiveMask && (waiting & mask) == mask) {  // every lane of the mask waits: with this mask?
        Thread* lanes[32] = {};
        bool complete = true;
        for (int i = 0; i < 32; ++i) {
            if (!((exists >> i) & 1u)) continue;
            lanes[i] = &l.thread[first + i];
            if ((mask >> i) & 1u) complete &= lanes[i]->mask == t.mask;
        }
        if (complete) {
            for (int i = 0; i < 32; ++i)
                if ((mask >> i) & 1u) lanes[i]->result = warp_result(*lanes[i], lanes, mask);
            for (int i = 0; i < 32; ++i) {
                if (!((mask >> i) & 1u)) continue;
                lanes[i]->state = kReady;
                if (lanes[i] != &t) l.ready[l.n_ready++] = lanes[i];
            }
            waiting &= ~mask;
        }
    }
    --g_indivisible;
    if (t.state != kReady) reschedule(t.fiber);
}

// One block, from the caller's stack: the first thread drawn runs; the stack comes back here when all returned.
KCUDA_UNHOOKED void run_block(Launch& l) {
    Emulator& e = emu();
    l.n_ready = 0;
    l.done = 0;
    l.at_barrier = 0;
    for (int w = 0; w * 32 < l.n; ++w) l.at_warp_op[w] = 0;
    for (int k = 0; k < l.n; ++k) {
        Thread& t = l.thread[k];
        t.state = kReady;
        t.fiber = nullptr;
        l.ready[l.n_ready++] = &t;
    }
    Thread* first = pick(l);
    Fiber* f = fiber_for(first);
    e.current = first;
    e.from_main = true;
    start_switch(&e.scheduler_fake_stack, f->stack, kStackBytes);
    switch_to(&e.scheduler, &f->context);
    finish_switch(e.scheduler_fake_stack, nullptr, nullptr);
    e.current = nullptr;
}

KCUDA_UNHOOKED char* dynamic_shared() {  // `extern __shared__ T name[];`, rewritten
    me();
    return emu().launch->dynamic_shared;
}

KCUDA_UNHOOKED bool is_device_pointer(const void* p) {
    if (!p) return true;  // a null pointer faults only if the kernel uses it
    const char* c = static_cast<const char*>(p);
    for (auto& [start, size] : emu().device_ranges)
        if (c >= start && c <= start + size) return true;
    return false;
}

int dynamic_shared_limit(const void* k) {
    for (auto& [kernel, limit] : emu().shared_limits) if (kernel == k) return limit;
    return 48 * 1024;
}

cudaError_t check_config(dim3 g, dim3 b, size_t shared, const void* k) {
    unsigned long long threads = (unsigned long long)b.x * b.y * b.z;
    if (!threads || threads > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64) return cudaErrorInvalidConfiguration;
    if (!g.x || !g.y || !g.z || g.x > 2147483647u || g.y > 65535 || g.z > 65535) return cudaErrorInvalidConfiguration;
    if (shared > (size_t)dynamic_shared_limit(k)) return cudaErrorInvalidValue;
    return cudaSuccess;
}

void run_grid(Launch& l, size_t shared) {
    Emulator& e = emu();
    e.runner = pthread_self();
    if (!e.death_callback_set) {
#ifdef KCUDA_ASAN
        __sanitizer_set_death_callback(on_death);
#endif
        e.death_callback_set = true;
    }
    int n = (int)(l.block.x * l.block.y * l.block.z);
    l.threads.assign(n, Thread());
    l.ready_storage.assign(n, nullptr);
    for (int i = 0; i < n; ++i)
        l.threads[i] = Thread{uint3{i % l.block.x, (i / l.block.x) % l.block.y, i / (l.block.x * l.block.y)}, i};
    l.thread = l.threads.data();
    l.ready = l.ready_storage.data();
    l.waiting_storage.assign((n + 31) / 32, 0u);
    l.at_warp_op = l.waiting_storage.data();
    l.n = n;
    std::vector<char> dynamic(shared ? shared : 1);
    l.dynamic_shared = dynamic.data();
    Launch* outer = e.launch;
    e.launch = &l;
    for (unsigned z = 0; z < l.grid.z; ++z)
        for (unsigned y = 0; y < l.grid.y; ++y)
            for (unsigned x = 0; x < l.grid.x; ++x) {
                l.block_idx = uint3{x, y, z};
                l.sm = (unsigned)(next_random() % 132);
                g_preempt_rng = next_random() | 1;
                g_loads_left = preemption_gap(kLoadOdds);
                g_stores_left = preemption_gap(kStoreOdds);
                memset(dynamic.data(), 0xff, dynamic.size());  // NaN in every float until the block writes it
                run_block(l);
            }
    e.launch = outer;
}

template <class T> void check_argument(const T& value, int position) {
    if constexpr (std::is_pointer_v<T>) {
        if (!is_device_pointer(const_cast<const void*>(static_cast<const volatile void*>(value)))) {
            char message[512];
            snprintf(message, sizeof message,
                     "argument %d of kernel %s is a host pointer (not from cudaMalloc, nor a device pointer the grader "
                     "passed): on a GPU the kernel faults when it reads it (an illegal memory access). Copy the data "
                     "to a cudaMalloc'd buffer with cudaMemcpy and pass that", position, emu().kernel_name);
            fail(message);
        }
    }
}

// `k | Config(grid, block, shared, stream)(args...)`: the rewritten `k<<<grid, block, shared, stream>>>(args...)`.
struct Config {
    dim3 grid, block;
    size_t shared;
    Config(dim3 g, dim3 b, size_t s = 0, cudaStream_t = nullptr) : grid(g), block(b), shared(s) {}
    template <class... A> auto operator()(A&&... args) const {
        return std::make_pair(*this, std::tuple<std::decay_t<A>...>(std::forward<A>(args)...));
    }
};

template <class... P, class... A, size_t... I>
void launch(void (*k)(P...), const Config& c, std::tuple<A...>& args, std::index_sequence<I...>) {
    Emulator& e = emu();
    name_kernel(reinterpret_cast<const void*>(k));
    cudaError_t bad = check_config(c.grid, c.block, c.shared, reinterpret_cast<const void*>(k));
    if (bad != cudaSuccess) { e.last_error = bad; return; }
    std::tuple<P...> params(static_cast<P>(std::get<I>(args))...);
    (check_argument(std::get<I>(params), (int)I + 1), ...);
    struct Closure { void (*k)(P...); std::tuple<P...>* params; } closure{k, &params};
    Launch l;
    l.grid = c.grid; l.block = c.block; l.closure = &closure;
    l.body = [](void* p) {
        auto* cl = static_cast<Closure*>(p);
        std::tuple<P...> mine = *cl->params;  // parameters are per thread: a kernel may change its own
        std::apply(cl->k, mine);
    };
    run_grid(l, c.shared);
}

template <class... P, class... A>
void operator|(void (*k)(P...), std::pair<Config, std::tuple<A...>>&& call) {
    static_assert(sizeof...(P) == sizeof...(A), "a kernel launch passes a different number of arguments than the "
                  "kernel takes");
    launch(k, call.first, call.second, std::index_sequence_for<A...>{});
}

// A kernel no function pointer type names: an overload set, or a function template whose arguments the launch
// deduces. Each thread calls it with its own copy of the launch's arguments, converted to the parameters of the
// kernel the call chooses, as nvcc's launch does. No attribute set with cudaFuncSetAttribute applies (no pointer to
// look it up by): 48 KB of dynamic shared memory at most.
template <class Call, class... A, size_t... I>
void launch_by_call(Call& kernel, const char* name, const Config& c, std::tuple<A...>& args, std::index_sequence<I...>) {
    Emulator& e = emu();
    snprintf(e.kernel_name, sizeof e.kernel_name, "%s", name);
    cudaError_t bad = check_config(c.grid, c.block, c.shared, nullptr);
    if (bad != cudaSuccess) { e.last_error = bad; return; }
    (check_argument(std::get<I>(args), (int)I + 1), ...);
    struct Closure { Call* kernel; std::tuple<A...>* args; } closure{&kernel, &args};
    Launch l;
    l.grid = c.grid; l.block = c.block; l.closure = &closure;
    l.body = [](void* p) {
        auto* cl = static_cast<Closure*>(p);
        std::tuple<A...> mine = *cl->args;  // arguments are per thread: a kernel may change its own
        std::apply(*cl->kernel, mine);
    };
    run_grid(l, c.shared);
}

// A launch site, `::kcuda::site(pointer, call, "k") | Config(...)(args...)` (the rewritten `k<<<...>>>(args...)`):
// `pointer(0)` is the kernel's function pointer where `k` names one function (`single` deduces its type), and does
// not compile where `k` is an overload set or a template to deduce: then the launch calls `call(args...)`.
template <class Pointer, class Call> struct Site {
    Pointer pointer;
    Call call;
    const char* name;
};
template <class Pointer, class Call> Site<Pointer, Call> site(Pointer pointer, Call call, const char* name) {
    return {pointer, call, name};
}
template <class Tag, class... P> auto single(void (*k)(P...)) { return k; }

template <class Pointer, class Call, class... A>
void operator|(Site<Pointer, Call>&& at, std::pair<Config, std::tuple<A...>>&& call) {
    if constexpr (std::is_invocable_v<Pointer&, int>)
        at.pointer(0) | std::move(call);
    else
        launch_by_call(at.call, at.name, call.first, call.second, std::index_sequence_for<A...>{});
}

}  // namespace
}  // namespace kcuda

// ---- the built-in variables ---------------------------------------------------------------------------------
#define threadIdx (::kcuda::me().idx)
#define blockIdx (::kcuda::emu().launch->block_idx)
#define blockDim (::kcuda::emu().launch->block)
#define gridDim (::kcuda::emu().launch->grid)

// ---- synchronisation and warp intrinsics ----------------------------------------------------------------
KCUDA_UNHOOKED inline void __syncthreads() { ::kcuda::me().op = ::kcuda::kSync; ::kcuda::wait_at(::kcuda::kAtBlockBarrier); }
KCUDA_UNHOOKED inline int kcuda_block_vote(int predicate, ::kcuda::WarpOp op) {
    ::kcuda::Thread& t = ::kcuda::me();
    t.op = op; t.predicate = predicate;
    ::kcuda::wait_at(::kcuda::kAtBlockBarrier);
    return (int)t.result;
}
KCUDA_UNHOOKED inline int __syncthreads_count(int p) { return kcuda_block_vote(p, ::kcuda::kSync); }
KCUDA_UNHOOKED inline int __syncthreads_and(int p) { return kcuda_block_vote(p, ::kcuda::kAll); }
KCUDA_UNHOOKED inline int __syncthreads_or(int p) { return kcuda_block_vote(p, ::kcuda::kAny); }

KCUDA_UNHOOKED inline uint64_t kcuda_warp(::kcuda::WarpOp op, unsigned mask, uint64_t value, int arg, int width, int predicate = 0) {
    ::kcuda::Thread& t = ::kcuda::me();
    if (!((mask >> (t.linear & 31)) & 1u))
        ::kcuda::fail("a warp intrinsic was called by a lane its own mask leaves out: the mask must include the "
                      "calling lane (0xffffffff when every lane of the warp calls it)");
    if (width < 1 || width > 32 || (width & (width - 1)))
        ::kcuda::fail("a __shfl_*_sync width must be a power of 2 from 1 to 32");
    t.op = op; t.mask = mask; t.value = value; t.arg = arg; t.width = width; t.predicate = predicate;
    ::kcuda::wait_at_warp_op();
    return t.result;
}
template <class T> KCUDA_UNHOOKED uint64_t kcuda_bits(T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "warp shuffles move values of at most 8 bytes");
    uint64_t bits = 0; memcpy(&bits, &v, sizeof(T)); return bits;
}
template <class T> KCUDA_UNHOOKED T kcuda_from_bits(uint64_t bits) { T v; memcpy(&v, &bits, sizeof(T)); return v; }
template <class T> KCUDA_UNHOOKED T __shfl_sync(unsigned m, T v, int src, int w = 32) {
    return kcuda_from_bits<T>(kcuda_warp(::kcuda::kShfl, m, kcuda_bits(v), src, w));
}
template <class T> KCUDA_UNHOOKED T __shfl_up_sync(unsigned m, T v, unsigned d, int w = 32) {
    return kcuda_from_bits<T>(kcuda_warp(::kcuda::kShflUp, m, kcuda_bits(v), (int)d, w));
}
template <class T> KCUDA_UNHOOKED T __shfl_down_sync(unsigned m, T v, unsigned d, int w = 32) {
    return kcuda_from_bits<T>(kcuda_warp(::kcuda::kShflDown, m, kcuda_bits(v), (int)d, w));
}
template <class T> KCUDA_UNHOOKED T __shfl_xor_sync(unsigned m, T v, int lane_mask, int w = 32) {
    return kcuda_from_bits<T>(kcuda_warp(::kcuda::kShflXor, m, kcuda_bits(v), lane_mask, w));
}
KCUDA_UNHOOKED inline unsigned __ballot_sync(unsigned m, int p) { return (unsigned)kcuda_warp(::kcuda::kBallot, m, 0, 0, 32, p); }
KCUDA_UNHOOKED inline int __any_sync(unsigned m, int p) { return (int)kcuda_warp(::kcuda::kAny, m, 0, 0, 32, p); }
KCUDA_UNHOOKED inline int __all_sync(unsigned m, int p) { return (int)kcuda_warp(::kcuda::kAll, m, 0, 0, 32, p); }
KCUDA_UNHOOKED inline void __syncwarp(unsigned m = 0xffffffffu) { kcuda_warp(::kcuda::kSync, m, 0, 0, 32); }
KCUDA_UNHOOKED inline unsigned __reduce_add_sync(unsigned m, unsigned v) { return (unsigned)kcuda_warp(::kcuda::kReduceAdd, m, v, 0, 32); }
KCUDA_UNHOOKED inline int __reduce_min_sync(unsigned m, int v) { return (int)kcuda_warp(::kcuda::kReduceMin, m, (uint32_t)v, 0, 32); }
KCUDA_UNHOOKED inline int __reduce_max_sync(unsigned m, int v) { return (int)kcuda_warp(::kcuda::kReduceMax, m, (uint32_t)v, 0, 32); }
KCUDA_UNHOOKED inline unsigned __activemask() {  // the lanes of this warp that reach this call (every other lane returned or waits)
    return (unsigned)kcuda_warp(::kcuda::kActiveMask, 1u << (::kcuda::me().linear & 31), 0, 0, 32);
}
inline unsigned __lanemask_lt() { return (1u << (::kcuda::me().linear & 31)) - 1; }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void kcuda_yield() { ::kcuda::wait_at(::kcuda::kReady); }  // let the block's other threads run (a spin-wait)
inline void __nanosleep(unsigned) { kcuda_yield(); }
[[noreturn]] inline void __trap() { ::kcuda::fail("the kernel called __trap()"); }
inline void __brkpt() { ::kcuda::fail("the kernel called __brkpt()"); }
inline long long clock64() { return (long long)std::chrono::steady_clock::now().time_since_epoch().count(); }
inline unsigned kcuda_linear_thread() { return (unsigned)::kcuda::me().linear; }  // %warpid, %laneid come from it
inline unsigned __smid() { ::kcuda::me(); return ::kcuda::emu().launch->sm; }
// A shared-memory address as PTX sees it (cp.async's destination): the pointer's low 32 bits; the thread keeps the
// high ones of the last pointer it converted, which cp.async puts back (an offset within one array keeps them).
inline size_t __cvta_generic_to_shared(const void* p) {
    uint64_t bits = reinterpret_cast<uint64_t>(p);
    ::kcuda::me().shared_high = bits >> 32;
    return (size_t)(uint32_t)bits;
}
inline void kcuda_cp_async(uint64_t shared, const void* global, int size, int bytes) {  // cp.async, done at once
    char* dst = reinterpret_cast<char*>((::kcuda::me().shared_high << 32) | (uint32_t)shared);
    memcpy(dst, global, (size_t)bytes);
    memset(dst + bytes, 0, (size_t)(size - bytes));
}

inline void kcuda_st_shared_v4(uint64_t shared, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {  // st.shared.v4.b32
    uint32_t* dst = reinterpret_cast<uint32_t*>((::kcuda::me().shared_high << 32) | (uint32_t)shared);
    dst[0] = a, dst[1] = b, dst[2] = c, dst[3] = d;
}

// ---- 16-bit floats' bits as floats (cuda_fp16.h's and cuda_bf16.h's conversions, the tensor cores' operands) -------
// Not instrumented: an mma reads thousands of them, and they touch only their argument.
KCUDA_UNHOOKED inline float kcuda_half_to_float(unsigned short h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) return (sign ? -1.f : 1.f) * (float)m * 0x1p-24f;  // zero and subnormals
    const uint32_t u = sign | (e == 31 ? (0xffu << 23) | (m << 13) : ((e + 112u) << 23) | (m << 13));
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
}
KCUDA_UNHOOKED inline float kcuda_bf16_to_float(unsigned short b) {
    const uint32_t u = (uint32_t)b << 16;
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
}

// ---- the tensor cores' PTX: ldmatrix and mma.sync m16n8k16, warp-wide -------------------------------------------
namespace kcuda {
// `mine` handed to the calling lane's warp (Thread::fragments), `read(warp, lane)` run once every lane of it has
// handed over (the PTX ISA's fragment layouts say what a lane reads of the others'), and back when every lane has
// read. `what` names the instruction where the warp is not whole.
template <class Read>
inline void in_warp(const char* what, const void* mine, Read read) {
    Thread& t = me();
    const Launch& l = *emu().launch;
    if (lanes_of_warp(l, t.linear / 32) != 0xffffffffu) {
        static char message[160];
        snprintf(message, sizeof message, "%s needs a whole warp of 32 threads: make the block's size a multiple of 32",
                 what);
        fail(message);
    }
    t.fragments = mine;
    ::__syncwarp();
    read(&l.thread[t.linear & ~31], t.linear & 31);
    ::__syncwarp();
}
struct LdmatrixLane { const char* row; };
KCUDA_UNHOOKED inline uint16_t ldmatrix_half(const Thread* warp, int lane, int offset) {  // of the row `lane` names
    uint16_t x;
    __builtin_memcpy(&x, static_cast<const LdmatrixLane*>(warp[lane].fragments)->row + offset, 2);
    return x;
}
// Lane l's register i: tile i's row l / 4, 16-bit columns 2 (l % 4) and 2 (l % 4) + 1, the rows' addresses given by
// lanes 8i .. 8i + 7; transposed, rows 2 (l % 4) and 2 (l % 4) + 1 of tile i, column l / 4.
KCUDA_UNHOOKED inline void ldmatrix_lanes(uint32_t* r, int tiles, bool trans, const Thread* warp, int l) {
    for (int i = 0; i < tiles; ++i) {
        const uint32_t lo = trans ? ldmatrix_half(warp, 8 * i + 2 * (l % 4), 2 * (l / 4))
                                  : ldmatrix_half(warp, 8 * i + l / 4, 4 * (l % 4));
        const uint32_t hi = trans ? ldmatrix_half(warp, 8 * i + 2 * (l % 4) + 1, 2 * (l / 4))
                                  : ldmatrix_half(warp, 8 * i + l / 4, 4 * (l % 4) + 2);
        r[i] = lo | (hi << 16);
    }
}
struct MmaLane { uint32_t a[4], b[2]; };
KCUDA_UNHOOKED inline float mma_value(uint32_t word, int k, bool bf16) {  // half k % 2 of a register
    const unsigned short x = (unsigned short)(k & 1 ? word >> 16 : word & 0xffffu);
    return bf16 ? kcuda_bf16_to_float(x) : kcuda_half_to_float(x);
}
// d = a b + c for lane l's four elements: rows g and g + 8, columns 2t and 2t + 1 (g = l / 4, t = l % 4). a's
// element (row, k) is in lane 4 (row % 8) + (k % 8) / 2, register (row >= 8) + 2 (k >= 8), half k % 2; b's (k, n)
// in lane 4 n + (k % 8) / 2, register k >= 8, half k % 2.
KCUDA_UNHOOKED inline void mma_lanes(float* d, const float* c, bool bf16, const Thread* warp, int l) {
    const int g = l / 4, t = l % 4;
    for (int e = 0; e < 4; ++e) {
        const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
        float sum = c[e];
        for (int k = 0; k < 16; ++k) {
            const MmaLane* a = static_cast<const MmaLane*>(warp[4 * (row % 8) + (k % 8) / 2].fragments);
            const MmaLane* b = static_cast<const MmaLane*>(warp[4 * col + (k % 8) / 2].fragments);
            sum = fmaf(mma_value(a->a[(row >= 8) + 2 * (k >= 8)], k, bf16), mma_value(b->b[k >= 8], k, bf16), sum);
        }
        d[e] = sum;
    }
}
}  // namespace kcuda

template <class R>
inline void kcuda_ldmatrix(int tiles, bool trans, uint64_t shared, R& r0, R& r1, R& r2, R& r3) {
    const ::kcuda::LdmatrixLane mine{reinterpret_cast<const char*>((::kcuda::me().shared_high << 32) | (uint32_t)shared)};
    uint32_t r[4];
    ::kcuda::in_warp("ldmatrix", &mine, [&](const ::kcuda::Thread* warp, int lane) {
        ::kcuda::ldmatrix_lanes(r, tiles, trans, warp, lane);
    });
    R* out[4] = {&r0, &r1, &r2, &r3};
    for (int i = 0; i < tiles; ++i) *out[i] = (R)r[i];
}
template <class R>
inline void kcuda_ldmatrix(int tiles, bool trans, uint64_t shared, R& r0) { R x; kcuda_ldmatrix(tiles, trans, shared, r0, x, x, x); }
template <class R>
inline void kcuda_ldmatrix(int tiles, bool trans, uint64_t shared, R& r0, R& r1) { R x; kcuda_ldmatrix(tiles, trans, shared, r0, r1, x, x); }

template <class F>
inline void kcuda_mma_16816(bool bf16, F& d0, F& d1, F& d2, F& d3, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                            uint32_t b0, uint32_t b1, float c0, float c1, float c2, float c3) {
    const ::kcuda::MmaLane mine{{a0, a1, a2, a3}, {b0, b1}};
    const float c[4] = {c0, c1, c2, c3};
    float d[4];
    ::kcuda::in_warp("mma.sync", &mine, [&](const ::kcuda::Thread* warp, int lane) {
        ::kcuda::mma_lanes(d, c, bf16, warp, lane);
    });
    d0 = d[0], d1 = d[1], d2 = d[2], d3 = d[3];
}

// ---- atomics: indivisible (fibers switch only at barriers); a failed CAS lets the others run (spin locks) ----
#define KCUDA_ATOMIC(NAME, T, EXPR) inline T NAME(T* a, T v) { \
    ++::kcuda::g_indivisible; T old = *a; *a = (EXPR); ::kcuda::note_atomic(a); --::kcuda::g_indivisible; return old; }
#define KCUDA_ATOMICS(T) \
    KCUDA_ATOMIC(atomicAdd, T, old + v) KCUDA_ATOMIC(atomicExch, T, v) \
    KCUDA_ATOMIC(atomicMin, T, v < old ? v : old) KCUDA_ATOMIC(atomicMax, T, v > old ? v : old)
KCUDA_ATOMICS(int)
KCUDA_ATOMICS(unsigned int)
KCUDA_ATOMICS(unsigned long long)
KCUDA_ATOMICS(long long)
KCUDA_ATOMIC(atomicAdd, float, old + v)
KCUDA_ATOMIC(atomicExch, float, v)
KCUDA_ATOMIC(atomicAdd, double, old + v)
KCUDA_ATOMIC(atomicSub, int, old - v)
KCUDA_ATOMIC(atomicSub, unsigned int, old - v)
KCUDA_ATOMIC(atomicAnd, int, old & v)
KCUDA_ATOMIC(atomicAnd, unsigned int, old & v)
KCUDA_ATOMIC(atomicAnd, unsigned long long, old & v)
KCUDA_ATOMIC(atomicOr, int, old | v)
KCUDA_ATOMIC(atomicOr, unsigned int, old | v)
KCUDA_ATOMIC(atomicOr, unsigned long long, old | v)
KCUDA_ATOMIC(atomicXor, int, old ^ v)
KCUDA_ATOMIC(atomicXor, unsigned int, old ^ v)
KCUDA_ATOMIC(atomicInc, unsigned int, old >= v ? 0 : old + 1)
KCUDA_ATOMIC(atomicDec, unsigned int, (old == 0 || old > v) ? v : old - 1)
template <class T> T kcuda_cas(T* a, T compare, T v) {
    ++::kcuda::g_indivisible;
    T old = *a;
    if (old == compare) { *a = v; ::kcuda::note_atomic(a); }
    --::kcuda::g_indivisible;
    if (old != compare && ::kcuda::emu().current) kcuda_yield();
    return old;
}
inline int atomicCAS(int* a, int c, int v) { return kcuda_cas(a, c, v); }
inline unsigned int atomicCAS(unsigned int* a, unsigned int c, unsigned int v) { return kcuda_cas(a, c, v); }
inline unsigned long long atomicCAS(unsigned long long* a, unsigned long long c, unsigned long long v) { return kcuda_cas(a, c, v); }
inline unsigned short atomicCAS(unsigned short* a, unsigned short c, unsigned short v) { return kcuda_cas(a, c, v); }
#define KCUDA_SCOPED(NAME) template <class... A> auto NAME##_block(A... a) { return NAME(a...); } \
    template <class... A> auto NAME##_system(A... a) { return NAME(a...); }
KCUDA_SCOPED(atomicAdd) KCUDA_SCOPED(atomicSub) KCUDA_SCOPED(atomicExch) KCUDA_SCOPED(atomicMin)
KCUDA_SCOPED(atomicMax) KCUDA_SCOPED(atomicCAS) KCUDA_SCOPED(atomicAnd) KCUDA_SCOPED(atomicOr)

// ---- math: CUDA's device functions that the C library lacks --------------------------------------------------
using std::isfinite;
using std::isinf;
using std::isnan;
using std::signbit;
template <class A, class B> inline auto min(A a, B b) -> std::common_type_t<A, B> { return b < a ? b : a; }
template <class A, class B> inline auto max(A a, B b) -> std::common_type_t<A, B> { return a < b ? b : a; }
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return powf(10.f, x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline void __sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float fdividef(float x, float y) { return x / y; }
inline float rsqrtf(float x) { return 1.f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float rcbrtf(float x) { return 1.f / cbrtf(x); }
inline float __frsqrt_rn(float x) { return 1.f / sqrtf(x); }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frcp_rn(float x) { return 1.f / x; }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline float exp10f(float x) { return powf(10.f, x); }
inline float normcdff(float x) { return 0.5f * erfcf(-x * 0.70710678f); }
inline double normcdf(double x) { return 0.5 * erfc(-x * 0.7071067811865476); }
inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
inline int __float2int_rz(float x) { return (int)x; }
inline int __float2int_rd(float x) { return (int)floorf(x); }
inline int __float2int_ru(float x) { return (int)ceilf(x); }
inline unsigned __float2uint_rn(float x) { return (unsigned)nearbyintf(x); }
inline float __int2float_rn(int x) { return (float)x; }
inline float __uint2float_rn(unsigned x) { return (float)x; }
inline float __ll2float_rn(long long x) { return (float)x; }
inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
inline unsigned __float_as_uint(float x) { unsigned i; memcpy(&i, &x, 4); return i; }
inline float __int_as_float(int i) { float x; memcpy(&x, &i, 4); return x; }
inline float __uint_as_float(unsigned i) { float x; memcpy(&x, &i, 4); return x; }
inline long long __double_as_longlong(double x) { long long i; memcpy(&i, &x, 8); return i; }
inline double __longlong_as_double(long long i) { double x; memcpy(&x, &i, 8); return x; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    unsigned r = 0;
    for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
    return r;
}
inline int __mul24(int a, int b) { return a * b; }
inline unsigned __umul24(unsigned a, unsigned b) { return a * b; }
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline unsigned __sad(int a, int b, unsigned c) { return (unsigned)(a > b ? a - b : b - a) + c; }
inline int __vabsdiffs4(int a, int b) { return a > b ? a - b : b - a; }
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline T __ldcv(const T* p) { return *p; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stwb(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }

// ---- the preemption hooks: AddressSanitizer's checks, called for every access (asan-instrumentation-with-call-
// threshold=0): the check (the shadow read here; the preloaded runtime's check, which reports, where it is not 0),
// then now and then another thread's turn: a countdown per kind (loads, stores) of the accesses outside the
// thread's own stack, drawn anew (seeded) at each chance --------------------------------------------------------
//
// A check comes before its access, and a read-modify-write (`hist[b]++`) gets one check, before its load. So a
// thread switched out at a check first notes the bytes there, and puts them back when it resumes, just before its
// own access: its load reads what it would have read had it run before the others, and its store overwrites
// theirs — the lost update of a racing `++` on a GPU. Only a racing program can tell: without a race nobody writes
// those bytes meanwhile (no barrier is passed while this thread is out). One legal program can: a poll of a volatile
// flag that another thread of the block sets; its write may be undone (docs/cuda-on-cpu.md).
#ifdef KCUDA_ASAN
namespace kcuda {
namespace {
// A chance of a switch at a check (the countdown of its kind reached 0): the next is drawn, and the thread is
// switched out if it runs learner code that touches memory outside its own stack.
KCUDA_UNHOOKED __attribute__((noinline)) void chance(uintptr_t address, size_t size, long& left, unsigned odds) {
    left = preemption_gap(odds);
    Thread* t = g_running;
    // (a thread on its way into a barrier has left kReady: the emulator's own code then, never switched out)
    if (!t || g_indivisible || t->state != kReady || !t->fiber || address - (uintptr_t)t->fiber->stack < kStackBytes ||
        size > 64)
        return;
    unsigned char before[64];
    volatile unsigned char* at = reinterpret_cast<volatile unsigned char*>(address);
    g_touching = &left == &g_stores_left ? "write" : "read";  // (an unmapped address faults here, not in the kernel)
    g_touching_size = size;
    for (size_t i = 0; i < size; ++i) before[i] = at[i];
    g_touching = nullptr;
    unsigned long first = g_atomics;
    t->state = kReady;
    reschedule(t->fiber);
    bool atomic_wrote = g_atomics - first > 64;
    for (unsigned long i = first; !atomic_wrote && i < g_atomics; ++i) {
        uintptr_t p = reinterpret_cast<uintptr_t>(g_atomic_ring[i & 63]);
        atomic_wrote = p < address + size && p + 8 > address;
    }
    if (atomic_wrote) return;
    // Only the bytes another thread wrote meanwhile are put back: a load of read-only memory (a `const` table in
    // .rodata, the page after an input the kernel reads past) must not fault on a write the kernel never made.
    for (size_t i = 0; i < size; ++i)
        if (at[i] != before[i]) at[i] = before[i];
}
// AddressSanitizer's shadow memory: a byte per 8 bytes of memory, 0 when all 8 may be touched. Where the runtime
// says where it is, a hook reads it first and calls the runtime's check (which reports) only when it is not 0.
KCUDA_UNHOOKED uintptr_t find_shadow_offset() {
    auto* offset = reinterpret_cast<uintptr_t*>(dlsym(RTLD_DEFAULT, "__asan_shadow_memory_dynamic_address"));
    if (!offset || !*offset || *offset == ~(uintptr_t)0) return 0;
    char* p = static_cast<char*>(malloc(1));  // sanity check: one byte of its 8 may be touched, the next may not
    bool right = p && *reinterpret_cast<const signed char*>(((uintptr_t)p >> 3) + *offset) == 1 &&
                 !__asan_address_is_poisoned(p) && __asan_address_is_poisoned(p + 1);
    free(p);
    return right ? *offset : 0;
}
uintptr_t g_shadow_offset = find_shadow_offset();  // 0: every check goes to the runtime
KCUDA_UNHOOKED inline signed char shadow_of(uintptr_t a, uintptr_t offset) {
    return *reinterpret_cast<const signed char*>((a >> 3) + offset);
}
KCUDA_UNHOOKED inline bool addressable(uintptr_t a, size_t size) {  // [a, a + size) is all addressable (size <= 16)
    uintptr_t offset = g_shadow_offset;
    return offset && size <= 16 && shadow_of(a, offset) == 0 && shadow_of(a + size - 1, offset) == 0 &&
           (size <= 8 || shadow_of(a + 8, offset) == 0);
}
}  // namespace
}  // namespace kcuda
// The runtime's check, called where the shadow is not all 0 (it reports what is wrong, or finds nothing: a partly
// addressable granule), then the countdown of its kind.
#define KCUDA_HOOK(NAME, SIZE, LEFT, ODDS) \
    static __attribute__((noinline)) KCUDA_UNHOOKED void kcuda_checked##NAME(uintptr_t a) { \
        static void (*real)(uintptr_t) = reinterpret_cast<void (*)(uintptr_t)>(dlsym(RTLD_DEFAULT, #NAME)); \
        real(a); \
        if (a - ::kcuda::g_stack >= ::kcuda::kStackBytes && --::kcuda::LEFT <= 0) \
            ::kcuda::chance(a, SIZE, ::kcuda::LEFT, ::kcuda::ODDS); \
    } \
    extern "C" __attribute__((visibility("hidden"), optimize("omit-frame-pointer"))) KCUDA_UNHOOKED void NAME(uintptr_t a) { \
        if (__builtin_expect(!::kcuda::addressable(a, SIZE), 0)) return kcuda_checked##NAME(a); \
        if (a - ::kcuda::g_stack < ::kcuda::kStackBytes) return; \
        if (__builtin_expect(--::kcuda::LEFT <= 0, 0)) ::kcuda::chance(a, SIZE, ::kcuda::LEFT, ::kcuda::ODDS); \
    }
#define KCUDA_HOOK_N(NAME, LEFT, ODDS) \
    static __attribute__((noinline)) KCUDA_UNHOOKED void kcuda_checked##NAME(uintptr_t a, uintptr_t n) { \
        static void (*real)(uintptr_t, uintptr_t) = reinterpret_cast<void (*)(uintptr_t, uintptr_t)>(dlsym(RTLD_DEFAULT, #NAME)); \
        real(a, n); \
        if (a - ::kcuda::g_stack >= ::kcuda::kStackBytes && --::kcuda::LEFT <= 0) \
            ::kcuda::chance(a, n, ::kcuda::LEFT, ::kcuda::ODDS); \
    } \
    extern "C" __attribute__((visibility("hidden"), optimize("omit-frame-pointer"))) KCUDA_UNHOOKED void NAME(uintptr_t a, uintptr_t n) { \
        if (!n) return; \
        if (__builtin_expect(!::kcuda::addressable(a, n), 0)) return kcuda_checked##NAME(a, n); \
        if (a - ::kcuda::g_stack < ::kcuda::kStackBytes) return; \
        if (__builtin_expect(--::kcuda::LEFT <= 0, 0)) ::kcuda::chance(a, n, ::kcuda::LEFT, ::kcuda::ODDS); \
    }
KCUDA_HOOK(__asan_load1, 1, g_loads_left, kLoadOdds) KCUDA_HOOK(__asan_load2, 2, g_loads_left, kLoadOdds)
KCUDA_HOOK(__asan_load4, 4, g_loads_left, kLoadOdds) KCUDA_HOOK(__asan_load8, 8, g_loads_left, kLoadOdds)
KCUDA_HOOK(__asan_load16, 16, g_loads_left, kLoadOdds) KCUDA_HOOK_N(__asan_loadN, g_loads_left, kLoadOdds)
KCUDA_HOOK(__asan_store1, 1, g_stores_left, kStoreOdds) KCUDA_HOOK(__asan_store2, 2, g_stores_left, kStoreOdds)
KCUDA_HOOK(__asan_store4, 4, g_stores_left, kStoreOdds) KCUDA_HOOK(__asan_store8, 8, g_stores_left, kStoreOdds)
KCUDA_HOOK(__asan_store16, 16, g_stores_left, kStoreOdds) KCUDA_HOOK_N(__asan_storeN, g_stores_left, kStoreOdds)
#endif

#include "kcourse_cuda_cpu_runtime.h"

"""grader/cuda_cpu's text work, without a compiler: the launch and shared-memory rewrite, the check for what the
emulator cannot run, and the reading of a stopped child's output (explain). The emulator itself is tested end to
end in tests/test_cuda_cpu.py (slow)."""

from __future__ import annotations

import pytest

from grader.cuda_cpu import _launch_site, explain, rewrite, unsupported

DYNAMIC = "::kcuda::dynamic_shared()"
K = _launch_site("k")  # `k<<<` rewritten: the launch site of kernel k, up to its configuration


# ---- rewrite: launches --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "launch, expected",
    [
        ("k<<<grid, block>>>(a, b);", K + "grid, block)(a, b);"),
        ("k<<<(n + 255) / 256, 256, 0, stream>>>(x);", K + "(n + 255) / 256, 256, 0, stream)(x);"),
        ("scale<float, 4><<<g, b, smem>>>(in, out);", _launch_site("scale<float, 4>") + "g, b, smem)(in, out);"),
        ("ns::k <<<1, 2>>>(x);", _launch_site("ns::k") + "1, 2)(x);"),
        ("k <<< dim3(4, 2), dim3(8, 8) >>> ();", K + " dim3(4, 2), dim3(8, 8) ) ();"),
        ("k<<<1, p->threads()>>>(x);", K + "1, p->threads())(x);"),
        ("k<<<1, {16, 16, 1}>>>(x);", K + "1, {16, 16, 1})(x);"),
        ("(*fp)<<<1, 2>>>(x);", "(*fp) | ::kcuda::Config(1, 2)(x);"),  # no name to launch by: as written
        ("ops->fwd<<<1, 2>>>(x);", "ops->fwd | ::kcuda::Config(1, 2)(x);"),  # a pointer member: as written too
    ],
)
def test_rewrite_turns_launches_into_config_calls(launch, expected):
    assert rewrite(launch) == expected


def test_a_launch_site_goes_through_the_kernels_pointer_or_else_calls_it():
    """The site's first lambda names the one function `k` is (it does not compile for an overload set or a template
    to deduce, and the launch then uses the second, a call); the third argument names the kernel in messages."""
    site = _launch_site("ns::k<float, 4>")
    assert site.startswith("::kcuda::site([&](auto kcuda_t) -> decltype(::kcuda::single<decltype(kcuda_t)>(ns::k<")
    assert "[&](auto&&... kcuda_a) { ns::k<float, 4>(static_cast<decltype(kcuda_a)&&>(kcuda_a)...); }" in site
    assert site.endswith(', "ns::k<float, 4>") | ::kcuda::Config(') and "\n" not in site


def test_rewrite_keeps_every_line_where_it_was():
    text = (
        "__global__ void k(int* x) { x[threadIdx.x] = 1; }\n"
        "/* a comment\n   over lines */\n"
        "void run(int* x) {\n"
        "    k<<<1,\n"
        "        32>>>(x);  // a launch over two lines\n"
        "    k<<<2, 32>>>(x); k<<<3, 32>>>(x);\n"
        "}\n"
    )
    out = rewrite(text)
    assert out.count("\n") == text.count("\n")
    lines = out.splitlines()
    assert lines[4] == "    " + K + "1,"
    assert lines[5] == "        32)(x);  // a launch over two lines"
    assert lines[6] == f"    {K}2, 32)(x); {K}3, 32)(x);"
    assert lines[0] == text.splitlines()[0]


def test_rewrite_leaves_comments_and_strings_alone():
    text = (
        "// k<<<1, 1>>>(x) in a line comment\n"
        "/* and k<<<2, 2>>>(x)\n   in a block comment >>> */\n"
        'printf("<<<%d>>>\\n", 3);\n'
        'const char* s = "a \\" k<<<1, 1>>>(x) \\" b";\n'
        "int y = x >> 2, z = w << 3;\n"
    )
    assert rewrite(text) == text


def test_rewrite_of_a_launch_after_a_comment_and_a_string_on_its_line():
    text = 'printf(">>> "); /* <<< */ k<<<1, 2>>>(x); // >>>\n'
    assert rewrite(text) == f'printf(">>> "); /* <<< */ {K}1, 2)(x); // >>>\n'


def test_rewrite_leaves_nested_templates_alone():
    text = "std::vector<std::vector<std::pair<int, int>>> buckets;\n"
    assert rewrite(text) == text


def test_rewrite_translates_known_inline_ptx_line_for_line():
    text = (
        '__device__ unsigned sm() {\n  unsigned id;\n  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));\n'
        '  float y;\n  asm("ex2.approx.f32 %0, %1;"\n      : "=f"(y)\n      : "f"(x));\n  return id;\n}\n'
    )
    out = rewrite(text)
    assert out.count("\n") == text.count("\n")
    lines = out.splitlines()
    assert lines[2] == "  (id) = __smid();"
    assert lines[4] == "  (y) = exp2f((x));"
    assert lines[7] == "  return id;"


# ---- rewrite: dynamic shared memory ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "declaration, expected",
    [
        ("extern __shared__ float buf[];", f"float* buf = reinterpret_cast<float*>({DYNAMIC});"),
        (
            "extern __shared__ __align__(16) unsigned char smem[];",
            f"unsigned char* smem = reinterpret_cast<unsigned char*>({DYNAMIC});",
        ),
        ("extern __shared__ alignas(8) double d[ ];", f"double* d = reinterpret_cast<double*>({DYNAMIC});"),
        ("extern volatile __shared__ int v[];", f"volatile int* v = reinterpret_cast<volatile int*>({DYNAMIC});"),
        ("extern __shared__ volatile float w[];", f"volatile float* w = reinterpret_cast<volatile float*>({DYNAMIC});"),
        ("extern __shared__ T tile[];", f"T* tile = reinterpret_cast<T*>({DYNAMIC});"),
        ("extern __shared__ float4 quads[];", f"float4* quads = reinterpret_cast<float4*>({DYNAMIC});"),
        ("extern  __shared__  int\n    spread[];", f"int* spread = reinterpret_cast<int*>({DYNAMIC});"),
    ],
)
def test_rewrite_of_extern_shared_forms(declaration, expected):
    kernel = "__global__ void k() {{\n    {}\n}}\n"
    assert rewrite(kernel.format(declaration)) == kernel.format(expected)


def test_rewrite_leaves_static_shared_and_other_externs_alone():
    text = '__shared__ float tile[16][17];\nextern "C" int f();\nextern float table[];\n__shared__ int s[32];\n'
    assert rewrite(text) == text


def test_rewrite_of_extern_shared_aligned_to_an_expression():
    out = rewrite("extern __shared__ __align__(sizeof(float4)) unsigned char smem[];\n")
    assert out == f"unsigned char* smem = reinterpret_cast<unsigned char*>({DYNAMIC});\n"


# ---- unsupported ---------------------------------------------------------------------------------------------------
UNTRANSLATED = "inline PTX the emulator does not translate at line {} (it translates: "


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "int a;\n__device__ void f() { wgmma::mma_async(); }\n",
            "Hopper's warpgroup tensor-core instructions (wgmma) at line 2",
        ),
        ("void f() {}\n#include <cublas_v2.h>\n", "cuBLAS at line 2"),
        ("void f(cublasHandle_t h) {\n  cublasSgemm(h, CUBLAS_OP_N);\n}\n", "cuBLAS at line 1"),
        ("#include <cuda_runtime.h>\n\n#include <cuda_fp8.h>\n", "8-bit floats (__nv_fp8) at line 3"),
        ("int a;\n__device__ __nv_fp8_e4m3 x;\n", "8-bit floats (__nv_fp8) at line 2"),
        ("#include <cooperative_groups.h>\n", "cooperative groups at line 1"),
        ("namespace kittens {}\nusing T = kittens::st_bf<64, 64>;\n", "ThunderKittens at line 2"),
    ],
)
def test_unsupported_names_what_and_where(text, expected):
    assert unsupported(text) == expected


@pytest.mark.parametrize(
    "text, line",
    [
        ('__global__ void k() {\n  int x;\n\n  asm volatile("membar.gl;");\n}\n', 4),
        ('__device__ int lane() {\n  int l; asm("mov.u32 %0, %%clock;" : "=r"(l));\n  return l;\n}\n', 2),
        ('__device__ void f() {\n  __asm__ __volatile__(\n    "bar.sync 1, 64;"\n  );\n}\n', 2),
    ],
)
def test_unsupported_inline_ptx_with_its_line(text, line):
    assert unsupported(text).startswith(UNTRANSLATED.format(line))


def test_unsupported_lets_through_the_inline_ptx_it_translates_and_16_bit_floats():
    text = (
        "#include <cuda_fp16.h>\n__device__ unsigned sm() {\n  unsigned id;\n"
        '  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));\n  return id;\n}\n'
        "__device__ __half h; __device__ __nv_bfloat16 b;\n"
    )
    assert unsupported(text) is None


def test_unsupported_lets_through_wmma_which_mma_h_emulates():
    text = (
        "#include <cuda_runtime.h>\n#include <mma.h>\nusing namespace nvcuda;\n"
        "wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;\n"
    )
    assert unsupported(text) is None


@pytest.mark.parametrize(
    "statement, cpp",
    [
        (
            'asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\\n"\n'
            '             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));',
            "kcuda_ldmatrix(4, true, (addr), (r[0]), (r[1]), (r[2]), (r[3]));",
        ),
        (
            'asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared::cta.b16 {%0}, [%1];" : "=r"(x) : "r"(a));',
            "kcuda_ldmatrix(1, false, (a), (x));",
        ),
        (
            'asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "\n'
            '             "{%8, %9}, {%10, %11, %12, %13};" : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)\n'
            '             : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(c0), "f"(c1), "f"(c2), "f"(c3));',
            "kcuda_mma_16816(true, (d0), (d1), (d2), (d3), (a0), (a1), (a2), (a3), (b0), (b1), (c0), (c1), (c2), (c3));",
        ),
        (
            'asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" :: "r"(p), "r"(w), "r"(x), "r"(y), "r"(z));',
            "kcuda_st_shared_v4((p), (w), (x), (y), (z));",
        ),
        (  # spaced otherwise: the same
            'asm("ldmatrix.sync.aligned.m8n8.x2.shared.b16 { %0,%1 },[%2];" : "=r"(x), "=r"(y) : "r"(a));',
            "kcuda_ldmatrix(2, false, (a), (x), (y));",
        ),
    ],
)
def test_the_tensor_cores_ptx_is_translated_operand_for_operand(statement, cpp):
    assert unsupported(statement) is None
    assert rewrite(statement).strip() == cpp


def test_unsupported_counts_lines_through_comments_and_strings():
    text = '/* one\n two\n three */\nconst char* s = "x";  // four\nint y;\n  asm("trap;");\n'
    assert unsupported(text).startswith(UNTRANSLATED.format(6))


def test_unsupported_ignores_the_words_in_comments_strings_and_other_names():
    text = (
        '// asm("nop"), wmma::mma_sync, __half, cublasSgemm: not here\n'
        '/* asm volatile("membar.gl;");\n   #include <mma.h>\n   __nv_fp8_e4m3 x; cublasCreate(&h); */\n'
        'printf("asm(%d) wmma::x cublas\\n", 1);\n'
        "float plasma(float x) { return x; }\n"
        "int asm_count, my__half_count;\n"
        "__global__ void k(float* y) { y[threadIdx.x] = plasma(1.0f); }\n"
    )
    assert unsupported(text) is None


def test_unsupported_sees_no_problem_in_a_plain_kernel():
    assert (
        unsupported(
            "__global__ void add(const float* a, float* b, int n) {\n"
            "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) b[i] += a[i];\n}\n"
        )
        is None
    )


def test_unsupported_sees_a_quoted_include():
    assert unsupported('#include "kittens.cuh"\nusing namespace kittens;\n') == "ThunderKittens at line 1"


# ---- explain ------------------------------------------------------------------------------------------------------
ASAN_OVERFLOW = """\
=================================================================
==4441==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x615000001368 at pc 0x7f73df0d49b6 bp 0x7f73df0cfe70 sp 0x7f73df0cfe68
READ of size 4 at 0x615000001368 thread T0
    #0 0x7f73df0d49b5 in copy_shifted(float const*, float*) /tmp/kit/exercises/copy/copy.cu:6
    #1 0x7f73df0d383e in void std::__invoke_impl<void, void (*&)(float const*, float*)>(std::__invoke_other) /usr/include/c++/12/bits/invoke.h:61
    #5 0x7f73df0d383e in operator() /work/main/grader/cuda_cpu/include/kcourse_cuda_cpu.h:566
    #7 0x7f73df0d5b01 in fiber_main /work/main/grader/cuda_cpu/include/kcourse_cuda_cpu.h:262

0x615000001368 is located 104 bytes to the right of 256-byte region [0x615000001200,0x615000001300)
allocated by thread T0 here:
    #0 0x7f73e10b7e68 in __interceptor_aligned_alloc ../../../../src/libsanitizer/asan/asan_malloc_linux.cpp:113
    #1 0x7f73df0de006 in device_alloc /work/main/grader/cuda_cpu/include/kcourse_cuda_cpu_runtime.h:25

Shadow bytes around the buggy address:
=>0x0c2a7fff8260: fa fa fa fa fa fa fa fa fa fa fa fa fa[fa]fa fa
kcourse-emu: in kernel copy_shifted(float const*, float*), block (0, 0, 0), thread (17, 0, 0)
"""

ASAN_IN_HEADER = """\
=================================================================
==4454==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x615000001600 at pc 0x7f873171ea4c bp 0x7f8731719e70 sp 0x7f8731719e68
WRITE of size 4 at 0x615000001600 thread T0
    #0 0x7f873171ea4b in atomicAdd(int*, int) /work/main/grader/cuda_cpu/include/kcourse_cuda_cpu.h:671
    #1 0x7f873171ea4b in histogram(int const*, int*) /tmp/kit/exercises/histogram/histogram.cu:15
    #2 0x7f873171d99a in operator() /work/main/grader/cuda_cpu/include/kcourse_cuda_cpu.h:566
kcourse-emu: in kernel histogram(int const*, int*), block (0, 0, 0), thread (4, 0, 0)
"""

ASAN_SEGV = """\
AddressSanitizer:DEADLYSIGNAL
=================================================================
==3009==ERROR: AddressSanitizer: SEGV on unknown address 0x000000000000 (pc 0x7f181d2d4a99 bp 0x7f181d2cfe90 sp 0x7f181d2cfe80 T0)
==3009==The signal is caused by a WRITE memory access.
==3009==Hint: address points to the zero page.
    #0 0x7f181d2d4a99 in write_all(int*) /tmp/kit/faults.cu:18
    #5 0x7f181d2d3ad1 in operator() /work/main/grader/cuda_cpu/include/kcourse_cuda_cpu.h:566

AddressSanitizer can not provide additional info.
==3009==ABORTING
kcourse-emu: in kernel write_all(int*), block (0, 0, 0), thread (0, 0, 0)
"""


def test_explain_an_out_of_bounds_read():
    code, message = explain("RESULT partial\n" + ASAN_OVERFLOW)
    assert code == "memory_error"
    assert message.startswith(
        "your code read or wrote past the end (or before the start) of an array (read of 4 "
        "bytes) at copy.cu:6 in copy_shifted; in kernel copy_shifted(float const*, float*), "
        "block (0, 0, 0), thread (17, 0, 0). AddressSanitizer checked it"
    )


def test_explain_use_after_free_and_a_report_without_a_frame_of_the_learner():
    output = (
        "==1==ERROR: AddressSanitizer: heap-use-after-free on address 0x6 at pc 0x7 bp 0x8 sp 0x9\n"
        "WRITE of size 8 at 0x6 thread T0\n    #0 0x7 in memset ../../src/libsanitizer/interceptors.inc:799\n"
    )
    code, message = explain(output)
    assert code == "memory_error"
    assert message.startswith("your code used memory after cudaFree (write of 8 bytes). AddressSanitizer")


def test_explain_names_the_learners_line_not_the_emulators_header():
    code, message = explain(ASAN_IN_HEADER)
    assert code == "memory_error" and "histogram.cu:15 in histogram" in message, message


def test_explain_a_null_pointer():
    code, message = explain(ASAN_SEGV)
    assert code == "memory_error" and "null or wild pointer" in message and "faults.cu:18" in message, message


def test_explain_an_emulator_fault():
    output = (
        "some learner output\n"
        "kcourse-emu: the kernel called __trap()\n"
        "kcourse-emu: in kernel trap_on_three(int*), block (0, 0, 0), thread (3, 0, 0)\n"
    )
    assert explain(output) == (
        "emulated_fault",
        "your kernel stopped on the CPU emulator: the kernel called __trap(); "
        "in kernel trap_on_three(int*), block (0, 0, 0), thread (3, 0, 0)",
    )


def test_explain_says_nothing_of_other_output():
    assert explain("") is None
    assert explain("Traceback (most recent call last):\nValueError: shapes differ\n") is None
    assert explain("the log mentions kcourse-emu: but not at a line's start\n") is None


# A store into unmapped memory that the emulator's preemption hook (chance) reached first: the fault is the hook's read
# of the bytes, and AddressSanitizer says READ; the emulator's note says what the kernel's access was.
ASAN_SEGV_IN_THE_HOOK = """\
AddressSanitizer:DEADLYSIGNAL
=================================================================
==7907==ERROR: AddressSanitizer: SEGV on unknown address 0x7ff0dd4d2000 (pc 0x7ff0db2b8700 bp 0x7ff0dd4cfe60 sp 0x7ff0dd4cfe00 T0)
==7907==The signal is caused by a READ memory access.
    #0 0x7ff0db2b8700 in chance /work/main/grader/cuda_cpu/include/kcourse_cuda_cpu.h:1007
    #1 0x7ff0db2b6e0a in one_past(float*, int) /tmp/kit/kernel.cu:4

AddressSanitizer can not provide additional info.
==7907==ABORTING
kcourse-emu: access: write of 4 bytes
kcourse-emu: in kernel one_past(float*, int), block (0, 0, 0), thread (5, 0, 0)
"""


def test_explain_names_the_kernels_access_not_the_emulators_in_its_hook():
    code, message = explain(ASAN_SEGV_IN_THE_HOOK)
    assert code == "memory_error", message
    assert (
        "(write of 4 bytes) at kernel.cu:4 in one_past; in kernel one_past(float*, int), block (0, 0, 0), " in message
    )
    assert "(a read)" not in message and "read of" not in message, message


def test_explain_names_no_access_kind_of_the_hook_without_the_emulators_note():
    output = ASAN_SEGV_IN_THE_HOOK.replace("kcourse-emu: access: write of 4 bytes\n", "")
    code, message = explain(output)
    assert code == "memory_error" and "read on the host) at kernel.cu:4 in one_past;" in message, message


def test_explain_passes_on_a_thread_the_emulator_does_not_know():
    output = ASAN_OVERFLOW.replace(
        "thread (17, 0, 0)", "thread unknown (it stopped between two of the block's threads, or on another OS thread)"
    )
    code, message = explain(output)
    assert code == "memory_error" and "block (0, 0, 0), thread unknown (it stopped" in message, message

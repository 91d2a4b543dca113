"""Solution — C = A @ B in Triton, float16 / bfloat16 inputs, float32 accumulation, output in C's dtype.

Two kernels, one contract (any M, N, K; any strides):

* `matmul_kernel` is the tutorial's design ("Matrix Multiplication", triton-lang.org): one BLOCK_M x
  BLOCK_N tile of C per program, a loop over K in BLOCK_K steps feeding `tl.dot` (tensor cores; Triton
  software-pipelines the loads `num_stages` deep), programs ordered in groups of GROUP_M tile-rows so
  that the tiles running at the same time share rows of A and columns of B in L2, and `@triton.autotune`
  over block sizes, stages and warps. It takes any strides: a transposed view or a row slice works.
* `matmul_tma_kernel` is what closes the last gap to cuBLAS on Hopper (as the tutorial "Persistent
  Matmul" does): tiles are fetched by the TMA copy engine through tensor descriptors (which also
  zero-fill tiles hanging over the edge, so no masks), and one program per SM walks over many tiles, so
  one tile's epilogue overlaps the next one's loads. TMA needs row-major tensors whose rows start
  16-byte aligned; anything else takes `matmul_kernel`.

* `matmul_split_k_kernel` is for products whose C has too few tiles to give every SM one, over a long K
  (a weight's gradient in training: 768 x 256 outputs summed over 131,072 tokens would keep 12 of 132 SMs
  busy): K is cut into slices, each program sums one tile over one slice into a float32 buffer, and
  `sum_splits_kernel` adds the slices in a fixed order (the same answer every run) into C.

Where both of the first two apply, the first large product of each shape times both (each autotuned) and
keeps the faster.
`solutions/matmul_triton/ladder_bench.py` times them, the README's ladder steps and cuBLAS on a GPU.
"""

import os
import warnings

import torch
import triton
import triton.language as tl

try:  # host-side tensor descriptors: Triton >= 3.4
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover
    TensorDescriptor = None

# Under the Triton interpreter (TRITON_INTERPRET=1, set by the grader on a machine without a GPU)
# `@triton.autotune` would run every config on every new shape, on the CPU: there each kernel gets one
# small config, with several tiles and groups per case so the edges and the grouping are still exercised.
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def _configs(gpu, interpreter, pre_hook=None):
    chosen = interpreter if INTERPRET else gpu
    return [
        triton.Config(
            {"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": g, **extra},
            num_stages=s,
            num_warps=w,
            pre_hook=pre_hook,
        )
        for m, n, k, g, s, w, extra in chosen
    ]


# (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_stages, num_warps, extra): the tile sizes known to run well on
# an H100 for 16-bit inputs; a 128x256 tile with 8 warps is the usual winner at large sizes.
POINTER_CONFIGS = [
    (128, 256, 64, 8, 3, 8, {}),
    (128, 256, 64, 8, 4, 8, {}),
    (256, 128, 64, 8, 3, 8, {}),
    (128, 128, 64, 8, 4, 4, {}),
    (64, 256, 32, 8, 4, 4, {}),
    (128, 128, 32, 8, 4, 4, {}),
]
TMA_CONFIGS = [
    (128, 256, 64, 8, 3, 8, {"EPILOGUE_SUBTILE": False}),
    (128, 256, 64, 8, 3, 8, {"EPILOGUE_SUBTILE": True}),
    (128, 256, 64, 8, 4, 8, {"EPILOGUE_SUBTILE": True}),
    (128, 128, 128, 8, 3, 8, {"EPILOGUE_SUBTILE": True}),
    (128, 128, 64, 8, 4, 8, {"EPILOGUE_SUBTILE": False}),
]
SPLIT_K_CONFIGS = [
    (128, 128, 64, 8, 4, 8, {}),
    (128, 128, 64, 8, 3, 4, {}),
    (128, 64, 64, 8, 4, 4, {}),
    (64, 128, 64, 8, 4, 4, {}),
]
INTERPRETER_POINTER = [(32, 64, 32, 2, 1, 4, {})]
INTERPRETER_TMA = [(32, 64, 32, 2, 1, 4, {"EPILOGUE_SUBTILE": True})]
INTERPRETER_SMS = 4  # the persistent kernel's program count on the CPU: several tiles per program


SMALL = 512**3  # M * N * K below this: one config, not worth a compile and a timing per config and shape


def _prune(configs, named_args, **kwargs):
    """Small products are over in microseconds whatever the tiles: the last (smallest) config only."""
    return configs[-1:] if named_args["M"] * named_args["N"] * named_args["K"] < SMALL else configs


@triton.jit
def grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Tile `tile_id` -> (row, column) of tiles, going down GROUP_M tile-rows before moving right."""
    tiles_per_group = GROUP_M * num_pid_n
    first_pid_m = (tile_id // tiles_per_group) * GROUP_M
    group_rows = min(num_pid_m - first_pid_m, GROUP_M)  # the last group may be shorter
    pid_m = first_pid_m + (tile_id % tiles_per_group) % group_rows
    pid_n = (tile_id % tiles_per_group) // group_rows
    return pid_m, pid_n


@triton.autotune(
    configs=_configs(POINTER_CONFIGS, INTERPRETER_POINTER),
    key=["M", "N", "K"],
    prune_configs_by={"early_config_prune": _prune},
)
@triton.heuristics({"EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0})
@triton.jit
def matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr,
):
    pid_m, pid_n = grouped_tile(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    # Rows and columns past the edge wrap around (% M, % N) to valid ones: the loads need no M/N mask,
    # and the compiler still sees runs of consecutive columns when N is a multiple of 16 (wide loads).
    # The wrapped rows compute garbage that the masked store drops.
    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    cols = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:  # the last step hangs over K: zeros there add nothing to the sum
            a = tl.load(a_ptrs, mask=ks[None, :] < K - k * BLOCK_K, other=0.0)
            b = tl.load(b_ptrs, mask=ks[:, None] < K - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc)  # float32 accumulator: the products of 16-bit values are exact in it
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.autotune(
    configs=_configs(SPLIT_K_CONFIGS, INTERPRETER_POINTER),
    key=["M", "N", "K", "K_PER_SPLIT"],
    prune_configs_by={"early_config_prune": _prune},
)
@triton.jit
def matmul_split_k_kernel(
    a_ptr,
    b_ptr,
    partial_ptr,
    M,
    N,
    K,
    K_PER_SPLIT,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """Program (tile, s): the tile's sum over K's slice s (K_PER_SPLIT long, a multiple of BLOCK_K), written
    in float32 to partial[s]."""
    pid_m, pid_n = grouped_tile(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    k_start = tl.program_id(1) * K_PER_SPLIT
    k_end = tl.minimum(k_start + K_PER_SPLIT, K)
    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M  # wrapped, as in matmul_kernel: no M/N masks
    cols = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows[:, None] * stride_am + (k_start + ks)[None, :] * stride_ak
    b_ptrs = b_ptr + (k_start + ks)[:, None] * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_start, k_end, BLOCK_K):  # only the last slice's last step hangs over K
        a = tl.load(a_ptrs, mask=ks[None, :] < k_end - k, other=0.0)
        b = tl.load(b_ptrs, mask=ks[:, None] < k_end - k, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    p_ptrs = partial_ptr + tl.program_id(1) * M * N + rows[:, None] * N + cols[None, :]
    tl.store(p_ptrs, acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def sum_splits_kernel(partial_ptr, c_ptr, MN, N, SPLITS, stride_cm, stride_cn, BLOCK: tl.constexpr):
    """C = partial[0] + partial[1] + ..., in that order, cast to C's dtype, through C's strides."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < MN
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(SPLITS):
        acc += tl.load(partial_ptr + s * MN + offs, mask=inside, other=0.0)
    rows, cols = offs // N, offs % N
    tl.store(c_ptr + rows * stride_cm + cols * stride_cn, acc.to(c_ptr.dtype.element_ty), mask=inside)


def set_block_shapes(nargs):
    """Autotune pre-hook: the descriptors' tile shapes follow the config being run."""
    block_m, block_n, block_k = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["BLOCK_K"]
    nargs["a_desc"].block_shape = [block_m, block_k]
    nargs["b_desc"].block_shape = [block_k, block_n]
    nargs["c_desc"].block_shape = [block_m, block_n // 2 if nargs["EPILOGUE_SUBTILE"] else block_n]


@triton.autotune(
    configs=_configs(TMA_CONFIGS, INTERPRETER_TMA, set_block_shapes),
    key=["M", "N", "K"],
    prune_configs_by={"early_config_prune": _prune},
)
@triton.jit
def matmul_tma_kernel(
    a_desc,
    b_desc,
    c_desc,
    M,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    EPILOGUE_SUBTILE: tl.constexpr,
    NUM_SMS: tl.constexpr,
):
    num_pid_m, num_pid_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    # flatten=True lets the compiler pipeline the next tile's loads under this tile's epilogue; the
    # epilogue finds its tile from a counter of its own (tile_id_c), as the tutorial does, rather than
    # reuse values of the loop's prologue across the flattened, pipelined loop.
    tile_id_c = tl.program_id(0) - NUM_SMS
    for tile_id in tl.range(tl.program_id(0), num_pid_m * num_pid_n, NUM_SMS, flatten=True):
        pid_m, pid_n = grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):  # tiles past K, M or N come in as zeros
            a = a_desc.load([pid_m * BLOCK_M, ki * BLOCK_K])
            b = b_desc.load([ki * BLOCK_K, pid_n * BLOCK_N])
            acc = tl.dot(a, b, acc)
        tile_id_c += NUM_SMS
        pid_m, pid_n = grouped_tile(tile_id_c, num_pid_m, num_pid_n, GROUP_M)
        off_m, off_n = pid_m * BLOCK_M, pid_n * BLOCK_N
        if EPILOGUE_SUBTILE:  # store in two halves: half the shared memory for the epilogue, more for stages
            halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
            left, right = tl.split(halves)
            c_desc.store([off_m, off_n], left.to(c_desc.dtype))
            c_desc.store([off_m, off_n + BLOCK_N // 2], right.to(c_desc.dtype))
        else:
            c_desc.store([off_m, off_n], acc.to(c_desc.dtype))  # rows and columns past the edge are not written


def _tma_ready(*tensors: torch.Tensor) -> bool:
    """TMA reads row-major 2-D tensors whose base and row starts are 16-byte aligned (Hopper or newer)."""
    if TensorDescriptor is None or any(
        t.stride(1) != 1 or (t.stride(0) * t.element_size()) % 16 or t.data_ptr() % 16 for t in tensors
    ):
        return False
    return INTERPRET or (tensors[0].is_cuda and torch.cuda.get_device_capability(tensors[0].device)[0] >= 9)


def _num_sms(device: torch.device) -> int:
    return INTERPRETER_SMS if INTERPRET else torch.cuda.get_device_properties(device).multi_processor_count


def with_tma(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> None:
    (M, K), N = A.shape, B.shape[1]
    descriptors = [TensorDescriptor.from_tensor(t, [16, 16]) for t in (A, B, C)]  # tile shapes: set_block_shapes
    sms = _num_sms(A.device)
    grid = lambda meta: (min(sms, triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])),)
    matmul_tma_kernel[grid](*descriptors, M, N, K, NUM_SMS=sms)


def with_pointers(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> None:
    (M, K), N = A.shape, B.shape[1]
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
    matmul_kernel[grid](A, B, C, M, N, K, A.stride(0), A.stride(1), B.stride(0), B.stride(1), C.stride(0), C.stride(1))


SPLIT_MIN_K = 1024  # each slice walks at least this much of K (16 steps of 64): the pipeline's fill is paid once
MAX_SPLITS = 32
SUM_BLOCK = 1024


def splits_for(M: int, N: int, K: int, sms: int) -> int:
    """How many slices of K to spread C = A @ B over: 1 (no split) unless C's 128 x 128 tiles fill under
    half the SMs; then enough slices to give each SM about one program, each slice at least SPLIT_MIN_K long."""
    tiles = triton.cdiv(M, 128) * triton.cdiv(N, 128)
    if 2 * tiles > sms:
        return 1
    return max(1, min(sms // tiles, K // SPLIT_MIN_K, MAX_SPLITS))


def with_split_k(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, splits: int) -> None:
    (M, K), N = A.shape, B.shape[1]
    per_split = triton.cdiv(triton.cdiv(K, splits), 128) * 128  # a multiple of every config's BLOCK_K
    splits = triton.cdiv(K, per_split)
    partial = torch.empty((splits, M, N), device=A.device, dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]), splits)
    matmul_split_k_kernel[grid](A, B, partial, M, N, K, per_split, A.stride(0), A.stride(1), B.stride(0), B.stride(1))
    sum_splits_kernel[(triton.cdiv(M * N, SUM_BLOCK),)](
        partial, C, M * N, N, splits, C.stride(0), C.stride(1), BLOCK=SUM_BLOCK
    )


TMA_WINS: dict[tuple, bool] = {}  # (M, N, K, dtype) -> the TMA kernel beat the pointer kernel on this shape


def _tma_wins(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> bool:
    """Autotuning one level up: on the first large product of a shape, time both kernels (each autotuned)
    and keep the faster; which one wins depends on the shape, the GPU and the Triton version. A Triton
    that cannot build the TMA kernel here leaves everything to the pointer kernel, with a warning."""
    if INTERPRET:  # on the CPU, the TMA kernel's logic is checked on every aligned case
        return True
    M, K, N = *A.shape, B.shape[1]
    key = (M, N, K, A.dtype)
    if key not in TMA_WINS:
        try:
            if M * N * K < SMALL:
                with_tma(A, B, C)
                TMA_WINS[key] = True
            else:
                from triton.testing import do_bench

                TMA_WINS[key] = do_bench(lambda: with_tma(A, B, C)) <= do_bench(lambda: with_pointers(A, B, C))
        except Exception as exc:  # noqa: BLE001 (any compile or launch failure: the pointer kernel is correct)
            warnings.warn(
                f"matmul_triton: the TMA kernel failed ({type(exc).__name__}: {exc}); using the pointer kernel"
            )
            TMA_WINS[key] = False
    return TMA_WINS[key]


def matmul(A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> None:
    """C[:] = A @ B for A (M x K), B (K x N), C (M x N), all float16 or all bfloat16, any strides."""
    (M, K), N = A.shape, B.shape[1]
    splits = splits_for(M, N, K, _num_sms(A.device))
    if splits > 1:
        with_split_k(A, B, C, splits)
    elif _tma_ready(A, B, C) and _tma_wins(A, B, C):
        with_tma(A, B, C)
    else:
        with_pointers(A, B, C)

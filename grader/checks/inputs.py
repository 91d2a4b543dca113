"""Test inputs: made by the grader (the trusted parent), handed to the learner's process as files.

The parent draws every trial's inputs on the CPU from the seed, keeps them to compute the reference,
and writes them raw to a file the child maps; the child only moves them to its device and lays them
out as the case asks (a row slice of a wider tensor, a transposed view). So the values the learner's
code saw are the values the verdict was computed from, and nothing the child does can change them.

Inputs are never zeros (zeros hide unwritten outputs and wrong indexing). A case may ask for values
that break the classic mistakes of its topic: `scale`/`offset` (softmax without max subtraction
overflows at offset 100), `special` values (-inf entries or fully masked rows), a trial `scale` that
moves every trial's answer far from the previous one (so a cached answer is told from rounding). A
tensor's `transform` names a function of the exercise's reference.py that the drawn values pass through
(in float64, before the cast to the dtype): the way to hand an operator inputs only some values make
realistic, such as a softmax output whose rows are positive and sum to 1. A case may name its own; an
integer tensor with one is drawn through it too (a histogram's bins); and a transform's keyword-only
parameters get the case's sizes and the inputs drawn before it (a CSR matrix: see `transformed`)."""

from __future__ import annotations

import importlib.util
import inspect
import math
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from grader.core import hostload
from grader.core.spec import Case, ExerciseSpec, SpecError, TensorSpec, shape_of

INT_POISON = -1234567  # an integer output nobody computes by accident
# A uint8 output (a pixel) can hold no value that is not also an answer, so its poison is an ordinary byte:
# checking.py counts an element holding it as never written only where the answer is another value.
BYTE_POISON = 0xA5
# Outputs start as NaN with a payload no arithmetic produces (a computed NaN, 0/0 or inf-inf, has the
# default payload), so "never written" is told from "computed NaN" (an overflow: a stability bug).
POISON_BITS = {
    torch.float32: (torch.int32, 0x7FC5A5A5),
    torch.float64: (torch.int64, 0x7FF8A5A5A5A5A5A5),
    torch.float16: (torch.int16, 0x7E5A),
    torch.bfloat16: (torch.int16, 0x7FC5),
}
# Outputs an entry point allocates itself come from torch's caching allocator: the worker leaves this 2-byte
# pattern in the blocks it will hand out next (worker.poison_free_memory). One pattern for every dtype, because
# which freed block each output lands in is the allocator's choice (a float16 `out` once landed in the block
# poisoned for a float32 `lse`, and a kernel that wrote nothing was told its tail was missing): read as float16
# or bfloat16 it is 0x7FC5, as float32 0x7FC57FC5, as float64 0x7FC57FC57FC57FC5, each a NaN whose payload
# no arithmetic produces.
FREE_POISON = {
    torch.float32: 0x7FC57FC5,
    torch.float64: 0x7FC57FC57FC57FC5,
    torch.float16: 0x7FC5,
    torch.bfloat16: 0x7FC5,
}
ALLOCATOR_BLOCK = 512  # bytes: the caching allocator hands out multiples of this
CHUNK = 1 << 22  # elements drawn per generator: chunks are drawn in parallel, and the result does not
#                  depend on how many threads drew them
ROW_SLICE_PAD = 37  # a row slice of a tensor this many columns wider: its row stride is not its width
GUARD = 1 << 16  # poisoned elements after each contiguous output: a store past its end (a missing bounds
#                  check writes index n first) changes them, see written_outside
INPUT_TAIL = GUARD  # plain NaNs after each float input under the Triton interpreter (with_nan_tail)
TRIAL_SCALE = 0.5  # trial t multiplies float inputs by (1 + 0.5 t): answers of two trials are far apart


def torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def element_size(dtype_name: str) -> int:
    return torch.empty((), dtype=torch_dtype(dtype_name)).element_size()


def dtype_of(tensor: TensorSpec, case: Case) -> str:
    return tensor.dtype or case.dtype


# --- drawing values (parent side) ----------------------------------------------------------------
def _draw(numel: int, seed: int, init: str) -> torch.Tensor:
    """float32 values, chunk by chunk from per-chunk generators (deterministic, parallel)."""
    out = torch.empty(numel, dtype=torch.float32)
    chunks = [(start, min(numel, start + CHUNK)) for start in range(0, numel, CHUNK)]

    def fill(index_range):
        index, (start, stop) = index_range
        gen = torch.Generator().manual_seed(seed * 7919 + index)
        view = out[start:stop]
        if init == "normal":
            view.normal_(generator=gen)
        else:
            view.uniform_(generator=gen)
            if init == "positive":
                view += 0.5

    if len(chunks) > 1:
        with ThreadPoolExecutor(min(len(chunks), hostload.cpu_share())) as pool:  # other GPUs' grades share the host
            list(pool.map(fill, enumerate(chunks)))
    elif chunks:
        fill((0, chunks[0]))
    return out


def _apply_special(x: torch.Tensor, special: str, seed: int) -> None:
    """Values the operator defines and naive code gets wrong (x is float32, flat view of the last dim)."""
    rows = x.reshape(-1, x.shape[-1]) if x.dim() else x.reshape(1, 1)
    gen = torch.Generator().manual_seed(seed ^ 0x5EED)
    if special == "neg_inf_entries":  # masked positions: softmax gives them 0, the rest still sums to 1
        mask = torch.rand(rows.shape, generator=gen) < 0.25
        mask[:, 0] = False  # every row keeps a finite entry
        rows[mask] = float("-inf")
    elif special == "neg_inf_rows":  # fully masked rows, where the operator defines an answer
        rows[:: max(1, rows.shape[0] // 3)] = float("-inf")
    elif special == "large":  # the top of the dtype's range in a few places
        index = torch.randint(0, rows.numel(), (max(1, rows.numel() // 64),), generator=gen)
        rows.view(-1)[index] = 3e4
    else:
        raise ValueError(f"unknown special inputs {special!r}")


@lru_cache(maxsize=None)
def _reference_module(path: Path):
    """The exercise's reference.py, loaded once per process (trusted: it ships with the grader)."""
    module_spec = importlib.util.spec_from_file_location(f"kcourse_transforms_{path.parent.name}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def transform_function(spec: ExerciseSpec, name: str):
    """reference.py's function `name`, which a spec.toml `transform` names."""
    function = getattr(_reference_module(spec.folder / "reference.py"), name, None)
    if not callable(function):
        raise SpecError(
            f"{spec.folder / 'spec.toml'}: transform {name!r} is not a function of "
            f"{spec.folder / 'reference.py'}: define `def {name}(x)` there"
        )
    return function


def integer_range(dtype: torch.dtype) -> tuple[int, int]:
    """[low, high) of drawn integer inputs: small positive ints (never 0), except bytes (pixels), drawn over
    all 256 values: a byte read as a signed char goes negative above 127, and bytes summed in 8 bits overflow."""
    return (0, 256) if dtype == torch.uint8 else (1, 100)


def generate(spec: ExerciseSpec, case: Case, seed: int, trial: int = 0, device: str = "cpu") -> dict[str, torch.Tensor]:
    """The inputs of one trial, on the CPU, contiguous, in the case's dtype. Draws are always made on the CPU
    (the same values everywhere); `device` is where transforms compute (heavy.py: "cuda")."""
    made = {}
    shared: dict[str, dict[str, torch.Tensor]] = {}  # transforms that make several inputs at once (see own_entry)
    for index, t in enumerate(spec.inputs):
        shape, dtype = shape_of(t, case), torch_dtype(dtype_of(t, case))
        numel = math.prod(shape)
        tensor_seed = seed * 31 + index
        options = case.inputs.get(t.name, {})
        transform = options.get("transform", t.transform)  # a case may name its own (histogram: all in one bin)
        if not dtype.is_floating_point and not transform:
            gen = torch.Generator().manual_seed(tensor_seed)
            made[t.name] = torch.randint(*integer_range(dtype), shape, generator=gen, dtype=dtype)
            continue
        x = _draw(numel, tensor_seed, options.get("init", t.init)).reshape(shape)
        scale = float(options.get("scale", 1.0)) * (1 + TRIAL_SCALE * trial)
        if scale != 1.0:
            x *= scale
        if options.get("offset"):
            x += float(options["offset"])
        if options.get("special"):
            _apply_special(x, options["special"], tensor_seed)
        if transform:
            if transform not in shared:
                x = transformed(spec, transform, x, case, made, device)
                if isinstance(x, dict):
                    shared[transform] = x
            if transform in shared:
                x = own_entry(spec, transform, t.name, shared)
        made[t.name] = x.to(dtype)
    return made


def transformed(
    spec: ExerciseSpec, name: str, x: torch.Tensor, case: Case, made: dict[str, torch.Tensor], device: str = "cpu"
) -> torch.Tensor | dict[str, torch.Tensor]:
    """x (in float64) through reference.py's function `name`. Keyword-only parameters it declares are filled
    from the case's parameters and the inputs drawn before this one, by name: how one input follows another
    (a CSR matrix's column indices follow its row pointers, `def csr_col_idx(x, *, row_ptr, K)`). An integer
    input with a transform is drawn like a float one (init, scale, the trial's scale) and the transform's
    whole numbers are cast to its dtype: a histogram's bins, a CSR matrix's row pointers."""
    function = transform_function(spec, name)
    known = {**case.params, **made}
    declared = inspect.signature(function).parameters.values()
    keywords = {p.name: _on(known[p.name], device) for p in declared if p.kind is p.KEYWORD_ONLY and p.name in known}
    result = function(x.double().to(device), **keywords)
    if isinstance(result, dict):
        return {key: value.cpu() for key, value in result.items()}
    return result.cpu()


def _on(value, device: str):
    return value.to(device) if isinstance(value, torch.Tensor) else value


def own_entry(spec: ExerciseSpec, name: str, tensor: str, shared: dict[str, dict[str, torch.Tensor]]) -> torch.Tensor:
    """A transform may return a dict of several inputs, computed together once per trial (an attention
    backward's out and lse, from q, k and v: `def attention_forward(x, *, q, k, v, causal)` returning
    {"out": ..., "lse": ...}); each input naming it takes the entry under its own name."""
    if tensor not in shared[name]:
        raise SpecError(
            f"{spec.folder / 'reference.py'}: transform {name!r} returned entries {sorted(shared[name])}, "
            f"none named {tensor!r}: return one for each input whose spec names it"
        )
    return shared[name][tensor]


# --- laying tensors out on the child's device ----------------------------------------------------
def place(values: torch.Tensor, layout: str | None, device: str) -> torch.Tensor:
    """`values` on `device` in the case's layout: contiguous, a row slice of a wider tensor (row stride
    != width), a transposed view of a tensor stored the other way round (column-major), or interleaved:
    dimensions 1 and 2 swapped in memory, so a (B, H, N, d) tensor lies as (B, N, H, d), the heads of each
    row side by side. That is how q, k and v arrive from a fused QKV projection: the head stride is d and
    the row stride H * d, and a kernel that finds a head at (b * H + h) * N * row_stride reads another's."""
    if not layout or layout == "contiguous":
        return values.to(device).contiguous()
    if layout == "row_slice":
        # a plain NaN for floats (not the output poison: a kernel that copies padding has written, and wrongly),
        # the integer poison for integer inputs
        pad = (
            float("nan") if values.is_floating_point() else (BYTE_POISON if values.dtype == torch.uint8 else INT_POISON)
        )
        wide = torch.full(
            (*values.shape[:-1], values.shape[-1] + ROW_SLICE_PAD), pad, dtype=values.dtype, device=device
        )
        view = wide[..., : values.shape[-1]]
        view.copy_(values)
        return view
    if layout == "transposed":
        return values.to(device).transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "interleaved":
        return values.to(device).transpose(1, 2).contiguous().transpose(1, 2)
    raise ValueError(f"unknown layout {layout!r}")


def with_nan_tail(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous float input followed by INPUT_TAIL plain NaNs in its allocation. Under the Triton
    interpreter a load past an input's end (a missing mask) reads host memory; with the tail it reads NaN
    in every run instead of whatever follows, which may be an output's poison (its NaN payload would then
    read as never written, not as a wrong sum). A plain NaN, as a row slice's padding, for the same reason."""
    if not tensor.is_floating_point() or not tensor.is_contiguous():
        return tensor
    flat = torch.full((tensor.numel() + INPUT_TAIL,), float("nan"), dtype=tensor.dtype, device=tensor.device)
    view = flat[: tensor.numel()].view(tensor.shape)
    view.copy_(tensor)
    return view


def poison(tensor: torch.Tensor) -> torch.Tensor:
    """Fill with the poison value (bit pattern) of its dtype; returns the tensor."""
    if tensor.dtype in POISON_BITS:
        int_dtype, bits = POISON_BITS[tensor.dtype]
        tensor.view(int_dtype).fill_(bits)
    elif tensor.is_floating_point():
        tensor.fill_(float("nan"))
    else:
        tensor.fill_(BYTE_POISON if tensor.dtype == torch.uint8 else INT_POISON)
    return tensor


def free_poison_block(like: torch.Tensor) -> torch.Tensor:
    """A block of whole allocator blocks, at least `like`'s bytes, holding FREE_POISON: freed, it is what the
    caching allocator hands the next allocation of that size, in whichever dtype it is read."""
    nbytes = -(-max(like.numel() * like.element_size(), 1) // ALLOCATOR_BLOCK) * ALLOCATOR_BLOCK
    return torch.empty(nbytes // 2, dtype=torch.int16, device=like.device).fill_(FREE_POISON[torch.float16])


def unwritten(tensor: torch.Tensor) -> torch.Tensor:
    """Mask of elements still holding the poison: never written by the kernel."""
    if tensor.dtype in POISON_BITS:
        int_dtype, bits = POISON_BITS[tensor.dtype]
        as_bits = tensor.contiguous().view(int_dtype)
        return (as_bits == bits) | (as_bits == FREE_POISON[tensor.dtype])
    if tensor.dtype == torch.uint8:
        return tensor == BYTE_POISON
    return tensor == INT_POISON if not tensor.is_floating_point() else torch.isnan(tensor)


def make_outputs(
    spec: ExerciseSpec, case: Case, device: str, inputs: dict[str, torch.Tensor] | None = None
) -> dict[str, torch.Tensor]:
    """Poisoned outputs (see POISON_BITS) so elements the kernel never wrote show, each followed by a
    poisoned guard (GUARD) so stores past its end show too; in the case's layout (a row slice: the row
    stride differs from the input's). Given the trial's `inputs`, an output updated in place (see
    in_place_names) starts as a copy of its input's values instead."""
    made = {}
    for t in spec.outputs:
        layout = case.outputs.get(t.name, {}).get("layout")
        storage, made[t.name] = empty_laid_out(shape_of(t, case), torch_dtype(dtype_of(t, case)), layout, device, GUARD)
        poison(storage)
    if inputs is not None:
        start_in_place(made, inputs)
    return made


def empty_laid_out(
    shape: list[int], dtype: torch.dtype, layout: str | None, device: str, guard: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """(storage, tensor): uninitialised memory for a tensor of `shape` in `layout` (as place lays inputs out), and
    the tensor in it; a contiguous one followed by `guard` more elements."""
    if layout == "row_slice":
        storage = torch.empty((*shape[:-1], shape[-1] + ROW_SLICE_PAD), dtype=dtype, device=device)
        return storage, storage[..., : shape[-1]]
    if layout == "transposed":
        storage = torch.empty((*shape[:-2], shape[-1], shape[-2]), dtype=dtype, device=device)
        return storage, storage.transpose(-1, -2)
    if layout == "interleaved":
        storage = torch.empty((shape[0], shape[2], shape[1], *shape[3:]), dtype=dtype, device=device)
        return storage, storage.transpose(1, 2)
    storage = torch.empty(math.prod(shape) + guard, dtype=dtype, device=device)
    return storage, storage[: math.prod(shape)].view(shape)


def stand_ins(spec: ExerciseSpec, case: Case, device: str) -> dict[str, torch.Tensor]:
    """The inputs and outputs of `case`, uninitialised, in their shapes, dtypes and layouts: what Triton specialises a
    compile on (dtypes, strides, alignment), with no value drawn, copied or written (no kernel launched). For a
    compile before the trials (compile_steps.compile_first); an input whose values the learner's host code reads gets
    whatever the memory held."""
    tensors = {}
    for role, places in ((spec.inputs, case.inputs), (spec.outputs, case.outputs)):
        for t in role:
            layout = places.get(t.name, {}).get("layout")
            _, tensors[t.name] = empty_laid_out(shape_of(t, case), torch_dtype(dtype_of(t, case)), layout, device)
    return tensors


def in_place_names(spec: ExerciseSpec) -> list[str]:
    """The outputs that are also inputs (the same name under [inputs] and [outputs]): tensors the entry point
    updates in place, like an optimizer step's parameters and moments. The reference takes the input and
    returns its updated value; the kernel is handed the output, which starts as a copy of the input (the
    input itself stays untouched, and is checked as such); the guard after it still catches stores past its end."""
    inputs = {t.name for t in spec.inputs}
    return [t.name for t in spec.outputs if t.name in inputs]


def start_in_place(outputs: dict[str, torch.Tensor], inputs: dict[str, torch.Tensor]) -> None:
    """Each output updated in place set to its input's values (through its own layout)."""
    for name, out in outputs.items():
        if name in inputs:
            out.copy_(inputs[name])


def written_outside(tensor: torch.Tensor) -> bool:
    """Whether a store landed in the output's allocation outside the output itself (the guard after a
    contiguous output, the padding of a row slice): those elements were poisoned and nothing may write them."""
    whole = tensor.new_empty(0).set_(tensor.untyped_storage())  # the allocation, flat
    if whole.numel() == tensor.numel():
        return False
    outside = torch.ones(whole.numel(), dtype=torch.bool, device=tensor.device)
    outside.as_strided(tensor.shape, tensor.stride(), tensor.storage_offset()).fill_(False)
    return bool((outside & ~unwritten(whole)).any())


def make_inputs(spec: ExerciseSpec, case: Case, seed: int, device: str, trial: int = 0) -> dict[str, torch.Tensor]:
    """Inputs generated and laid out in one process (profile and tune, which decide no verdict)."""
    values = generate(spec, case, seed, trial)
    return {name: place(v, case.inputs.get(name, {}).get("layout"), device) for name, v in values.items()}


# --- raw tensor files between the processes -------------------------------------------------------
def save_tensor(tensor: torch.Tensor, path: Path) -> dict[str, Any]:
    """Raw bytes (no pickle: the parent never unpickles what the learner's process wrote)."""
    flat = tensor.detach().contiguous().cpu()
    raw = flat.view(torch.uint8) if flat.numel() else flat
    raw.numpy().tofile(str(path))
    return {"path": str(path), "shape": list(flat.shape), "dtype": str(flat.dtype).removeprefix("torch.")}


def save_inputs(inputs: dict[str, torch.Tensor], folder: Path, key: Any) -> dict[str, dict[str, Any]]:
    """A trial's (or timed size's) inputs written for the child, `folder`/in-<key>-<name>.bin: each one's metadata."""
    return {name: save_tensor(t, Path(folder) / f"in-{key}-{name}.bin") for name, t in inputs.items()}


def load_tensor(meta: dict[str, Any], expected_numel: int | None = None, mapped: bool = False) -> torch.Tensor:
    """A tensor written by save_tensor; refuses a file whose size does not match its header. `mapped`: the
    file's pages themselves (no copy; writes to the tensor reach the file), for a caller that copies it out."""
    dtype = torch_dtype(meta["dtype"])
    shape = [int(s) for s in meta["shape"]]
    numel = math.prod(shape)
    if expected_numel is not None and numel != expected_numel:
        raise ValueError(f"holds {numel} elements, expected {expected_numel}")
    size = Path(meta["path"]).stat().st_size
    itemsize = torch.empty((), dtype=dtype).element_size()
    if size != numel * itemsize:
        raise ValueError(f"{meta['path']} has {size} bytes for {numel} × {itemsize}")
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.from_file(meta["path"], shared=mapped, size=numel, dtype=dtype).reshape(shape)

"""The child's side of `kcourse viz`: the learner's Triton kernel run once under Triton's interpreter, every
tl.load and tl.store of every program recorded: which program, which tensor, which elements.

The interpreter runs the programs of a launch one after another and funnels every memory access through two
methods of one object (`interpreter_builder.create_masked_load` / `create_masked_store`; atomics through
`create_atomic_rmw` / `create_atomic_cas`), after copying the kernel's tensor arguments to the host
(`GridExecutor._init_args_hst`). The Recorder wraps those for one call of the entry point. A lane's address is
matched to the tensor argument whose allocation holds it; the tensor is named by the entry point's own tensors
(the spec's inputs and outputs) when the argument shares their storage, else by the kernel's argument name
(scratch memory the learner's code allocated). A lane that is switched on but lies outside every argument's
allocation is switched off before the interpreter dereferences it (it would read or overwrite whatever memory
lies there, or crash the child): the findings count it, so the learner still sees the mistake.

triton-viz does the same recording, but importing it imports a Flask server and a Cloudflare tunnel client
and it drags in a dozen more packages; these few wrappers need nothing beyond Triton (docs/learners.md).
The child reports what it saw; the parent (grader/commands/viz.py) summarises and draws it."""

from __future__ import annotations

import dataclasses
import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

KINDS = ("load", "store", "atomic")
PADDING = 1 << 16  # bytes of padding on either side of each argument's host copy, beyond its own size


@dataclass
class Accesses:
    """One kind of access to one tensor, per element: the last program that made it (`program`, a launch's
    linear program id, -1: never; `launch`, the index of that launch) and, for races, the most programs of
    one launch that made it (`programs`). Lanes outside the tensor's elements are counted, switched off
    by the mask (`masked_out`) or not (`unmasked_out`)."""

    size: int
    program: np.ndarray = field(init=False)
    launch: np.ndarray = field(init=False)
    programs: np.ndarray = field(init=False)
    count: np.ndarray = field(init=False)  # programs of the element's last launch so far (scratch for `programs`)
    masked_out: int = 0
    unmasked_out: int = 0

    def __post_init__(self) -> None:
        self.program = np.full(self.size, -1, dtype=np.int64)
        self.launch = np.full(self.size, -1, dtype=np.int64)
        self.programs = np.zeros(self.size, dtype=np.int64)
        self.count = np.zeros(self.size, dtype=np.int64)

    def touch(self, elements: np.ndarray, launch: int, program: int) -> None:
        """`program` of `launch` accessed `elements`. The interpreter runs a launch's programs in order of
        their linear id, so counting the changes of program per element counts distinct programs."""
        e = np.unique(elements)
        new_launch = self.launch[e] != launch
        self.count[e[new_launch]] = 0
        new_program = new_launch | (self.program[e] != program)
        self.count[e[new_program]] += 1
        self.program[e], self.launch[e] = program, launch
        self.programs[e] = np.maximum(self.programs[e], self.count[e])

    def to_dict(self) -> dict[str, Any]:
        return {
            "program": self.program.tolist(),
            "launch": self.launch.tolist(),
            "programs": self.programs.tolist(),
            "masked_out": self.masked_out,
            "unmasked_out": self.unmasked_out,
        }


@dataclass
class Tracked:
    """A tensor the kernels touch: its name and role, and where each element lies in its allocation
    (`index_of`: the allocation's element slots -> the element's row-major index, -1 for slots that are
    no element of it: a row slice's padding, the guard after an output)."""

    name: str
    role: str  # input, output, or scratch (allocated by the learner's own code)
    shape: list[int]
    dtype: str
    itemsize: int
    index_of: np.ndarray
    kinds: dict[str, Accesses] = field(default_factory=dict)

    @classmethod
    def of(cls, name: str, role: str, tensor) -> "Tracked":
        slots = tensor.untyped_storage().nbytes() // tensor.element_size()
        offsets = np.full(tuple(tensor.shape), tensor.storage_offset(), dtype=np.int64)
        for dim, (size, stride) in enumerate(zip(tensor.shape, tensor.stride())):
            offsets += (np.arange(size, dtype=np.int64) * stride).reshape(
                [-1 if d == dim else 1 for d in range(tensor.dim())]
            )
        index_of = np.full(max(slots, 1), -1, dtype=np.int64)
        index_of[offsets.ravel()] = np.arange(offsets.size)
        return cls(
            name, role, list(tensor.shape), str(tensor.dtype).removeprefix("torch."), tensor.element_size(), index_of
        )

    @classmethod
    def allocation(cls, name: str, tensor) -> "Tracked":
        """Scratch memory, as the whole allocation `tensor` lies in: the learner's code may hand the kernel
        several views of one buffer, and each lands somewhere in it."""
        slots = tensor.untyped_storage().nbytes() // tensor.element_size()
        return cls.of(name, "scratch", tensor.new_empty(0).set_(tensor.untyped_storage(), 0, (slots,), (1,)))

    def as_output(self, name: str, tensor) -> "Tracked":
        """This scratch allocation's accesses as those of `tensor`, an output the entry point returned from it."""
        returned = Tracked.of(name, "output", tensor)
        slots = np.flatnonzero(returned.index_of >= 0)
        order = np.empty(slots.size, dtype=np.int64)
        order[returned.index_of[slots]] = slots  # element -> its slot in the allocation
        for kind, old in self.kinds.items():
            new = returned.accesses(kind)
            for key in ("program", "launch", "programs", "count"):
                setattr(new, key, getattr(old, key)[np.minimum(order, old.size - 1)])
            new.masked_out, new.unmasked_out = old.masked_out, old.unmasked_out
        return returned

    def accesses(self, kind: str) -> Accesses:
        if kind not in self.kinds:
            self.kinds[kind] = Accesses(math.prod(self.shape))
        return self.kinds[kind]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role,
            "shape": self.shape,
            "dtype": self.dtype,
            "kinds": {kind: self.kinds[kind].to_dict() for kind in KINDS if kind in self.kinds},
        }


@dataclass
class Argument:
    """A tensor argument of one launch: the tracked tensor and, on the host, its allocation (`base`, `nbytes`)
    inside a padded copy (`low` to `high`): lanes that run past the allocation land in the padding, so
    they are still this argument's, and harmless."""

    arg: str  # the kernel's parameter name
    tracked: Tracked
    base: int
    nbytes: int
    low: int
    high: int


class Recorder:
    """Every launch and memory access of the Triton interpreter while `installed()`. `known`: the entry
    point's tensors by name, each with its role (input or output)."""

    def __init__(self, known: dict[str, tuple[Any, str]]):
        self.by_storage: dict[int, Tracked] = {}
        for name, (tensor, role) in known.items():
            self.by_storage[tensor.untyped_storage().data_ptr()] = Tracked.of(name, role, tensor)
        self.launches: list[dict[str, Any]] = []
        self.arguments: list[Argument] = []  # the running launch's
        self.copies: dict[int, tuple[Any, Any]] = {}  # the running launch's: device allocation -> (copy's middle, it)
        self.host: tuple[list, dict] = ([], {})  # the running launch's host arguments, as the interpreter made them
        self.stray = {kind: 0 for kind in KINDS}  # lanes switched on that lie in no tensor argument at all
        self.switched_off = 0  # those: run with their lane switched off, so nothing dereferences them
        self.builder = None

    @contextmanager
    def installed(self) -> Iterator["Recorder"]:
        """The interpreter's memory methods and its copies of the arguments wrapped, then restored."""
        from triton.runtime import interpreter

        builder, executor = interpreter.interpreter_builder, interpreter.GridExecutor
        self.builder = builder
        wrappers = {
            "create_masked_load": self._load,
            "create_masked_store": self._store,
            "create_atomic_rmw": self._atomic_rmw,
            "create_atomic_cas": self._atomic_cas,
            "set_grid_dim": self._grid,
        }
        own = {name: builder.__dict__[name] for name in wrappers if name in builder.__dict__}  # patched by others
        to_host, back = executor._init_args_hst, executor._restore_args_dev
        for name, wrap in wrappers.items():
            setattr(builder, name, wrap(getattr(builder, name)))
        executor._init_args_hst, executor._restore_args_dev = self._to_host(to_host), self._back(back)
        try:
            yield self
        finally:
            executor._init_args_hst, executor._restore_args_dev = to_host, back
            for name in wrappers:
                builder.__dict__.pop(name, None)
            builder.__dict__.update(own)

    # --- the arguments: padded host copies -----------------------------------------------------
    def _to_host(self, original):
        """The interpreter's host copies of a launch's arguments, each tensor moved onto a padded copy of
        its whole allocation on the device (made here, so its layout is the device's in any Triton version)."""

        def copy_to_host(executor, args_dev, kwargs, *rest):
            args_hst, kwargs_hst = original(executor, args_dev, kwargs, *rest)
            self.copies, self.arguments, self.host = {}, [], (args_hst, kwargs_hst)
            self.launches.append({"kernel": executor.fn.__name__, "grid": [1, 1, 1], "args": {}})
            names = [*executor.arg_names[: len(args_dev)], *kwargs]
            padded = [
                self._padded(n, d, h)
                for n, d, h in zip(names, [*args_dev, *kwargs.values()], [*args_hst, *kwargs_hst.values()])
            ]
            return padded[: len(args_dev)], dict(zip(kwargs, padded[len(args_dev) :]))

        return copy_to_host

    def _back(self, original):
        """After the launch: the interpreter copies back what it copied (arguments in tuples too), then the
        padded copies' middles go back over the device allocations they came from."""

        def restore(executor, args_dev, _padded_args, kwargs, _padded_kwargs):
            host_args, host_kwargs = self.host
            result = original(executor, args_dev, host_args, kwargs, host_kwargs)
            for padded, device in self.copies.values():
                device.copy_(padded)
            return result

        return restore

    def _padded(self, arg: str, device_arg, host_arg):
        """`host_arg` (a tensor, or a descriptor's base) re-made on a padded copy of its allocation; else itself."""
        from triton.runtime.jit import TensorWrapper

        device = device_arg.base if isinstance(device_arg, TensorWrapper) else device_arg
        if not hasattr(device, "data_ptr"):
            base = getattr(device_arg, "base", None)  # a tensor descriptor (a dataclass): its base moves
            return (
                dataclasses.replace(host_arg, base=self._padded(arg, base, host_arg.base))
                if hasattr(base, "data_ptr")
                else host_arg
            )
        key = device.untyped_storage().data_ptr()
        if key not in self.copies:
            self._copy(arg, device)
        argument = self._argument(key)
        if argument.tracked.role == "scratch" and arg not in argument.tracked.name.split("/"):  # another view
            argument.tracked.name += "/" + arg
        self.launches[-1]["args"][arg] = argument.tracked.name
        buffer = self.copies[key][0]
        offset = (argument.base - buffer.untyped_storage().data_ptr()) // device.element_size()  # the padding
        moved = device.new_empty(0, device="cpu").set_(
            buffer.untyped_storage(), offset + device.storage_offset(), device.size(), device.stride()
        )
        return TensorWrapper(moved, device_arg.dtype) if isinstance(device_arg, TensorWrapper) else moved

    def _copy(self, arg: str, device) -> None:
        """A host copy of `device`'s whole allocation with PADDING bytes (and its own size) on either side."""
        import torch

        storage = device.untyped_storage()
        nbytes = storage.nbytes()
        pad = -(-(PADDING + nbytes) // 64) * 64  # a multiple of every element size
        buffer = torch.zeros(pad + nbytes + pad, dtype=torch.uint8)
        whole = torch.empty(0, dtype=torch.uint8, device=device.device).set_(storage)
        buffer[pad : pad + nbytes].copy_(whole)
        self.copies[storage.data_ptr()] = (buffer[pad : pad + nbytes], whole)
        if storage.data_ptr() not in self.by_storage:  # scratch memory of the learner's own, named by the parameter
            taken = {t.name for t in self.by_storage.values()}
            name = arg if arg not in taken else f"{arg}_{len(taken)}"
            self.by_storage[storage.data_ptr()] = Tracked.allocation(name, device)
        low = buffer.data_ptr()
        self.arguments.append(
            Argument(arg, self.by_storage[storage.data_ptr()], low + pad, nbytes, low, low + buffer.numel())
        )

    def _argument(self, device_storage: int) -> Argument:
        middle = self.copies[device_storage][0].data_ptr()
        return next(a for a in self.arguments if a.base == middle)

    # --- the wrappers --------------------------------------------------------------------------
    def _grid(self, original):
        def set_grid_dim(*grid):
            if self.launches:
                self.launches[-1]["grid"] = [int(size) for size in grid]
            return original(*grid)

        return set_grid_dim

    # (the arguments after the mask differ between Triton versions: passed on as they come)
    def _load(self, original):
        def load(ptrs, mask, *rest, **kwargs):
            return original(ptrs, self._record("load", ptrs, mask), *rest, **kwargs)

        return load

    def _store(self, original):
        def store(ptrs, value, mask, *rest, **kwargs):
            return original(ptrs, value, self._record("store", ptrs, mask), *rest, **kwargs)

        return store

    def _atomic_rmw(self, original):
        def atomic_rmw(op, ptr, val, mask, *rest, **kwargs):
            return original(op, ptr, val, self._record("atomic", ptr, mask), *rest, **kwargs)

        return atomic_rmw

    def _atomic_cas(self, original):
        def atomic_cas(ptr, *rest, **kwargs):
            self._record("atomic", ptr, None)
            return original(ptr, *rest, **kwargs)

        return atomic_cas

    # --- the accesses --------------------------------------------------------------------------
    def _program(self) -> int:
        """The running program's linear id: pid_0 outermost, as the interpreter runs them."""
        x, y, z = self.builder.grid_idx
        _, ny, nz = self.launches[-1]["grid"]
        return (x * ny + y) * nz + z

    def _record(self, kind: str, ptrs, mask):
        """Record one access, each lane for the argument whose padded copy holds it; returns the mask to run
        it with (lanes switched on outside every copy switched off)."""
        from triton.runtime.interpreter import TensorHandle

        addresses = np.asarray(ptrs.data, dtype=np.uint64)
        active = (
            np.ones(addresses.shape, dtype=bool)
            if mask is None
            else np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)
        )
        anywhere = np.zeros(addresses.shape, dtype=bool)
        for argument in self.arguments:
            inside = (addresses >= np.uint64(argument.low)) & (addresses < np.uint64(argument.high))
            if inside.any():
                self._count(kind, argument, addresses, active & inside, ~active & inside)
                anywhere |= inside
        unsafe = active & ~anywhere
        self.stray[kind] += int(unsafe.sum())
        if not unsafe.any() or mask is None:
            return mask
        self.switched_off += int(unsafe.sum())
        return TensorHandle(active & anywhere, mask.dtype)

    def _count(self, kind: str, argument: Argument, addresses: np.ndarray, on: np.ndarray, off: np.ndarray) -> None:
        """The lanes of `argument`'s copy: elements touched (lanes `on`), and lanes off its elements, on or off."""
        tracked = argument.tracked
        element = np.full(addresses.shape, -1, dtype=np.int64)
        mine = (addresses >= np.uint64(argument.base)) & (addresses < np.uint64(argument.base + argument.nbytes))
        slot = (addresses[mine] - np.uint64(argument.base)).astype(np.int64) // tracked.itemsize
        element[mine] = tracked.index_of[np.minimum(slot, tracked.index_of.size - 1)]
        accesses = tracked.accesses(kind)
        hit = on & (element >= 0)
        if hit.any():
            accesses.touch(element[hit], len(self.launches) - 1, self._program())
        accesses.masked_out += int((off & (element < 0)).sum())
        accesses.unmasked_out += int((on & (element < 0)).sum())

    def returned(self, outputs: dict[str, Any]) -> None:
        """The outputs an entry point returned (a functional operator): the scratch it allocated them in, renamed."""
        for name, tensor in outputs.items():
            key = tensor.untyped_storage().data_ptr() if hasattr(tensor, "untyped_storage") else None
            if key in self.by_storage and self.by_storage[key].role == "scratch":
                self.by_storage[key] = self.by_storage[key].as_output(name, tensor)

    def findings(self) -> dict[str, Any]:
        """What the parent draws: the launches, every tensor's accesses, the stray and switched-off lanes."""
        return {
            "launches": self.launches,
            "tensors": [t.to_dict() for t in self.by_storage.values()],
            "stray": self.stray,
            "switched_off": self.switched_off,
        }


def viz(worker, learner) -> dict[str, Any]:
    """The job: the case the parent chose, fresh inputs and outputs, one call of the entry point recorded."""
    from grader.checks.checking import make_inputs, make_outputs

    case = worker.spec.cases[worker.job.viz_case]
    inputs = make_inputs(worker.spec, case, worker.job.seed, worker.tensor_device)
    outputs = make_outputs(worker.spec, case, worker.tensor_device, inputs)
    tensors = worker.host_memory({**inputs, **outputs})
    returns = worker.variant.returns_outputs  # its outputs are what it returns, not the tensors made here
    known = {
        name: (tensor, "output" if name in outputs else "input")
        for name, tensor in tensors.items()
        if not (returns and name in outputs and name not in inputs)
    }
    recorder = Recorder(known)
    worker.progress(f"recording your kernel's loads and stores at {case.label()}")
    with recorder.installed():
        result = worker.call(learner, tensors, case, f"recording {case.label()}")
    if returns:
        returned = result if isinstance(result, (tuple, list)) else [result]
        recorder.returned({spec_out.name: t for spec_out, t in zip(worker.spec.outputs, returned)})
    return {"case": case.label(), **recorder.findings()}

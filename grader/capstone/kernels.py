"""Which of the learner's kernels serve the model, and one adapter that calls any of them.

The parent picks (`pick_kernels`): for each operation of the model and each role (forward, backward, the
optimizer step), the first exercise version in OPERATIONS whose file exists and whose latest grade passed
numerics (the kit's solutions: whose file exists), that takes the dtype the model feeds it (a version is
graded in the dtypes its spec has tolerances for) and that can run here. Everything else is PyTorch's,
with the reason. The choices are plain dicts: they travel to the child as JSON.

The child calls a chosen kernel through `ExerciseKernel`: the grader's own loader (loading.load) and the
spec's `args`, its outputs allocated from the spec's shapes and dtypes (inputs.shape_of, dtype_of) with
the case's parameters read off the tensors it is given. No exercise has glue of its own here."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# operation -> role -> exercise versions that can serve it ("exercise:version"), best first. A role's
# kernel computes that role alone, except where noted in ops.py (cross-entropy's one call gives both).
OPERATIONS: dict[str, dict[str, list[str]]] = {
    "embedding": {"forward": ["embedding:cuda"], "backward": ["embedding_backward:cuda"]},
    "layer_norm": {"forward": ["layer_norm:triton", "layer_norm:cuda"], "backward": ["layer_norm_backward:triton"]},
    "linear": {"forward": ["matmul_triton:triton"], "backward": ["matmul_triton:triton"]},
    "attention": {
        "forward": [
            "flash_attention_v2:triton",
            "flash_attention_v2:cuda",
            "flash_attention_v1:triton",
            "flash_attention_v1:cuda",
        ],
        "backward": ["flash_attention_v2_backward:triton", "flash_attention_v2_backward:cuda"],
    },
    # inside attention written with PyTorch matmuls, where no flash attention forward is yours
    "softmax": {"forward": ["softmax:triton", "softmax:cuda"], "backward": ["softmax_backward:triton"]},
    "gelu": {"forward": ["activations:gelu_tanh"], "backward": []},
    "cross_entropy": {"forward": ["cross_entropy:cuda"], "backward": ["cross_entropy:cuda"]},
    "adamw": {"step": ["adamw:cuda"]},
}
# Under the Triton interpreter (the CPU) a program costs milliseconds: a kernel launching one program per
# row (layer norm, softmax: ~20 ms a row measured) makes a 20-step run take many minutes. Only these
# exercises launch a handful of programs per call and run in the CPU's training run.
INTERPRETER_CHEAP = {"activations"}
INTERPRETER_SLOW = (
    "under the Triton interpreter (no GPU here) it launches one program per row at ~20 ms each: "
    "the tiny CPU run would take minutes, so PyTorch ran it; on a GPU it is yours"
)


def operation_dtypes(act: str, low: str) -> dict[str, str]:
    """The dtype each operation is fed, as autocast would: norms, softmax and the optimizer in float32 (`act`,
    the residual stream's), matmuls, attention, the activation and the logits in `low`."""
    return {
        "embedding": "float32",
        "layer_norm": act,
        "linear": low,
        "attention": low,
        "softmax": "float32",
        "gelu": low,
        "cross_entropy": low,
        "adamw": "float32",
    }


@dataclass
class Choice:
    """One role of one operation: the learner's kernel (exercise, lang, file) or PyTorch's (reason)."""

    operation: str
    role: str
    exercise: str = ""
    lang: str = ""
    file: str = ""
    library: str | None = None  # a compiled CUDA exercise's shared library (built by the parent)
    reason: str = ""  # why PyTorch serves it ("" when the learner's kernel does)

    @property
    def yours(self) -> bool:
        return bool(self.exercise)

    def label(self) -> str:
        return f"yours ({self.exercise}, {self.lang})" if self.yours else "PyTorch"


def _targets() -> dict[str, Any]:
    from grader.core.discovery import all_targets

    return {t.key: t for t in all_targets()}


def takes_dtype(target, dtype: str) -> bool:
    """Graded in this dtype: the version accepts it and the spec has its tolerance table."""
    from grader.core.spec import Case

    return target.variant.accepts(Case(params={"dtype": dtype})) and dtype in target.spec.tolerance


def why_not_here(target, dtype: str, gpu: bool, interpret_all: bool) -> str:
    """ "" when this version can run in this model here, else why not (the file and its grade aside)."""
    if not takes_dtype(target, dtype):
        graded = ", ".join(d for d in target.spec.tolerance if target.variant.accepts(_case(d)))
        return f"{target.key} is graded in {graded or 'other dtypes'}; the model feeds it {dtype} here"
    if not gpu and target.variant.language == "cuda":
        return f"{target.key} is CUDA: it runs only on an NVIDIA GPU, and none is here"
    if not gpu and not interpret_all and target.spec.id not in INTERPRETER_CHEAP:
        return f"{target.key}: {INTERPRETER_SLOW}"
    return ""


def _case(dtype: str):
    from grader.core.spec import Case

    return Case(params={"dtype": dtype})


def pick_kernels(
    source: str, dtypes: dict[str, str], gpu: bool, use: dict[str, Path] | None = None, interpret_all: bool = False
) -> list[Choice]:
    """Every operation's roles, each the learner's kernel or PyTorch's with the reason. `use`: files named
    on the command line ("activations:gelu_tanh" -> try.py) take their version's place, ungated by grades."""
    from grader.commands.compare_attention import why_not
    from grader.run.grade import learner_file

    targets, use = _targets(), use or {}
    choices = []
    for operation, roles in OPERATIONS.items():
        for role, candidates in roles.items():
            reasons, chosen = [], None
            for key in candidates:
                target = targets.get(key)
                if target is None:
                    continue
                path = use.get(key) or learner_file(target, source, None)
                reason = why_not_here(target, dtypes[operation], gpu, interpret_all) or (
                    "" if key in use else why_not(target, path, source)
                )
                if not reason:
                    chosen = Choice(operation, role, target.spec.id, target.variant.lang, str(path))
                    break
                reasons.append(reason)
            choices.append(chosen or Choice(operation, role, reason=_first(reasons, operation, role)))
    settle(choices)
    return choices


def settle(choices: list[Choice]) -> None:
    """Kernels that cannot be used with the others chosen: the softmax where a flash attention forward is yours
    (it computes the attention whole), the flash attention backward without the v2 forward's log-sum-exp."""
    by = {(c.operation, c.role): c for c in choices}
    forward = by.get(("attention", "forward"))
    if forward is None:
        return
    for role in ("forward", "backward"):
        softmax = by.get(("softmax", role))
        if forward.yours and softmax is not None and softmax.yours:
            _to_pytorch(softmax, f"not needed: your {forward.exercise} computes the whole attention")
    backward = by.get(("attention", "backward"))
    if backward is not None and backward.yours and forward.exercise != "flash_attention_v2":
        _to_pytorch(
            backward,
            f"{backward.exercise} reads the log-sum-exp of a flash_attention_v2 forward, and the "
            "attention forward here is " + (forward.exercise or "PyTorch's") + ": PyTorch ran the backward",
        )


def _first(reasons: list[str], operation: str, role: str) -> str:
    if not reasons:
        return f"no exercise of the kit computes the {operation} {role}"
    return reasons[0] + (f" (and {len(reasons) - 1} other version(s) could not serve)" if len(reasons) > 1 else "")


def build_cuda(choices: list[Choice], gpu_arch: str | None) -> None:
    """Compile the raw CUDA kernels chosen (in the parent, as `kcourse grade` does); one that does not build
    falls back to PyTorch with the compiler's first complaint."""
    from grader.toolchain import build

    targets = _targets()
    for choice in choices:
        if not choice.yours:
            continue
        variant = targets[f"{choice.exercise}:{choice.lang}"].variant
        if not variant.kind_of.nvcc:
            continue
        built = build.build_variant(Path(choice.file), variant, gpu_arch)
        if built.ok:
            choice.library = built.library
        else:
            _to_pytorch(choice, f"{Path(choice.file).name} did not build: {built.log.strip().splitlines()[0][:200]}")


def _to_pytorch(choice: Choice, reason: str) -> None:
    choice.exercise, choice.lang, choice.file, choice.library, choice.reason = "", "", "", None, reason


def as_dicts(choices: list[Choice]) -> list[dict[str, Any]]:
    return [asdict(c) for c in choices]


def from_dicts(rows: list[dict[str, Any]]) -> list[Choice]:
    return [Choice(**row) for row in rows]


# --- the child's side: calling an exercise's entry point on the model's tensors -----------------------


class ExerciseKernel:
    """Exercise X's entry point as a function of the model's tensors: `kernel(x=..., weight=..., bias=...)`
    returns its outputs by name. Parameters the spec's shapes name ("M", "N") are read off the inputs; the
    others (causal, lr, ...) are given as keywords too. Outputs are allocated from the spec (not poisoned:
    the kernel passed its grade; a NaN in training is caught and traced back to its operation); an output
    that is also an input (an optimizer step's p, m, v) is that very tensor, updated in place."""

    def __init__(self, operation: str, spec, variant, caller):
        self.operation, self.spec, self.variant, self.caller = operation, spec, variant, caller
        self.names = {t.name for t in spec.inputs}
        # the scalars an output's shape or dtype is written in: only these key the layout cache (AdamW's `step`
        # changes every call and must not add an entry per step)
        self._shaping = {"dtype"} | {
            name for t in spec.outputs for dim in t.shape for name in re.findall(r"[A-Za-z_]\w*", str(dim))
        }
        self._layouts: dict[tuple, tuple[dict[str, Any], list[tuple[str, list[int], Any]]]] = {}

    def __call__(self, **given: Any) -> dict[str, Any]:
        import torch

        tensors = {k: v for k, v in given.items() if isinstance(v, torch.Tensor)}
        extra = {k: v for k, v in given.items() if not isinstance(v, torch.Tensor)}
        key = tuple((k, tuple(t.shape), t.dtype) for k, t in tensors.items()) + tuple(
            sorted((k, v) for k, v in extra.items() if k in self._shaping)
        )
        if key not in self._layouts:
            self._layouts[key] = self._layout(tensors, extra)
        params, outputs = self._layouts[key]
        params = {**params, **extra}  # this call's scalars (lr, step), not the first call's
        device = next(iter(tensors.values())).device
        made = {
            name: tensors[name] if name in tensors else torch.empty(shape, dtype=dtype, device=device)
            for name, shape, dtype in outputs
        }
        result = self.caller({**tensors, **made}, params)
        if self.variant.returns_outputs:
            returned = list(result) if isinstance(result, (tuple, list)) else [result]
            made = dict(zip([name for name, _, _ in outputs], returned))
        return made

    def _layout(self, tensors: dict[str, Any], extra: dict[str, Any]) -> tuple[dict[str, Any], list]:
        """The case's parameters (shape names read off the inputs, the dtype of the first input that follows
        the case's) and each output's name, shape and dtype."""
        from grader.checks.inputs import dtype_of, shape_of, torch_dtype
        from grader.core.spec import Case

        params = dict(extra)
        named = {a.name for a in self.variant.args}  # a version may use some of the folder's tensors (activations)
        for spec_input in (t for t in self.spec.inputs if t.name in named):
            tensor = tensors.get(spec_input.name)
            if tensor is None:
                raise ValueError(f"{self.spec.id}: input {spec_input.name} not given")
            for dim, size in zip(spec_input.shape, tensor.shape):
                if isinstance(dim, str) and dim.isidentifier() and params.setdefault(dim, size) != size:
                    raise ValueError(f"{self.spec.id}: {dim} is {params[dim]} and {size}")
            if spec_input.dtype is None:
                params.setdefault("dtype", str(tensor.dtype).removeprefix("torch."))
        case = Case(params=params)
        outputs = [
            (t.name, shape_of(t, case), torch_dtype(dtype_of(t, case)))
            for t in self.spec.outputs
            if t.name in named or self.variant.returns_outputs
        ]
        return params, outputs


def load_kernel(choice: Choice, targets: dict[str, Any] | None = None) -> ExerciseKernel:
    """The chosen version loaded by the grader's own loader (raises loading.EntryError or the import's error)."""
    from grader.child import loading

    target = (targets or _targets())[f"{choice.exercise}:{choice.lang}"]
    caller = loading.load(
        target.variant, Path(choice.file), choice.library, f"capstone_{choice.operation}_{choice.role}"
    )
    return ExerciseKernel(choice.operation, target.spec, target.variant, caller)

"""An exercise's declarative spec (exercises/<id>/spec.toml), loaded into plain dataclasses.

The spec says everything the grader needs: how to call the learner's entry point, which tensors to
make for each test case, the tolerances per dtype, the byte / FLOP model and the speed threshold.
Adding an exercise means adding a folder; no grader code changes.
"""

from __future__ import annotations

import difflib
import math
import pickle
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.core import op_spec
from grader.core.errors import SpecError
from grader.core.spec_keys import CASE_KEYS, MISTAKE_KEYS, check_keys
from grader.core.vocabulary import CheckName, Code, Vocab
from grader.kinds import KINDS, NVCC_KINDS, Kind

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

LANG_OF_KIND = {name: kind.lang for name, kind in KINDS.items()}
DTYPES = ("float64", "float32", "float16", "bfloat16", "int32", "int64", "uint8")
INITS = ("normal", "uniform", "positive")
HOST_MEMORY = ("pageable", "pinned")
DEFAULT_DTYPE = "float32"


@dataclass
class TensorSpec:
    name: str
    shape: list[str | int]
    dtype: str | None = None  # None: the case's dtype
    init: str = "normal"  # normal: N(0,1); uniform: U[0,1); positive: U[0.5,1.5)
    # a function of the exercise's reference.py the drawn values pass through, so an input can be what the
    # operator really receives (y = softmax(logits) for a softmax backward); see inputs.generate
    transform: str | None = None
    # outputs only: a function of reference.py that judges this output by its properties instead of
    # comparing it with the reference elementwise, for answers that are not unique (see checking.judge_output)
    check: str | None = None
    # outputs only: the [tolerance.<name>] table that judges this output whatever the case's dtype (a float32
    # gradient summed over many rows beside a bfloat16 output: see ExerciseSpec.tolerance_of)
    tolerance: str | None = None


@dataclass
class Argument:
    name: str
    ctype: str | None = None  # for scalars passed to C: int32, int64, float32
    # "x.stride(0)": the stride (in elements) of tensor x along dimension 0, for C entry points that take
    # strided views (a row slice of a wider tensor); Python entry points read x.stride(0) themselves
    stride_of: str | None = None
    stride_dim: int = 0


@dataclass
class Variant:
    # the version's name: its key in spec.toml ([variants.cuda] -> "cuda"), what --lang picks and results are
    # keyed by; usually its language, but a version may be named for what differs (add2's "jit", "setup", "cmake")
    lang: str
    kind: str
    stub: str  # file name inside exercises/<id>/ (and solutions/<id>/)
    entry: str
    args: list[Argument]
    timeout_s: float = 60.0
    # cuda_host only: "pinned" hands the entry point page-locked host arrays, without which
    # cudaMemcpyAsync is staged by the driver and overlaps nothing (a streams exercise needs them)
    host_memory: str = "pageable"
    # the case dtypes this version takes (None: all): a CUDA entry point taking float* runs the float32
    # cases, while the Triton version of the same exercise also runs the float16 ones
    dtypes: list[str] | None = None
    # libraries of the CUDA Toolkit the compiled file links (["cublas"]: -lcublas), found in the toolkit or
    # in NVIDIA's pip wheels (build.link_flags); raw CUDA kinds only
    link: list[str] = field(default_factory=list)
    # header libraries the learner installs and points the kit at (REQUIREMENTS): ["thunderkittens"] builds with
    # its flags and includes (grader/toolchain/thunderkittens.py); without it the build is skipped with what to do
    requires: list[str] = field(default_factory=list)
    # torch_op only: how the operator is built (op_build.py): "jit" through torch.utils.cpp_extension.load,
    # "setup" with the exercise's setup.py (build_ext --inplace), "cmake" with its CMakeLists.txt
    build: str = "jit"
    # files of the exercise folder the build needs beside the learner's (sources, headers, setup.py,
    # CMakeLists.txt), given complete: copied next to the learner's file in the build folder (torch_op)
    files: list[Path] = field(default_factory=list)
    # the function of reference.py this version is checked and timed against: several entry points of one
    # file, each its own operator (activations' gelu_erf, gelu_tanh, silu, bias_gelu), are versions of one folder
    reference: str = "reference"
    # a Python entry point that returns its outputs instead of writing them into given tensors (a functional
    # operator: torch.library.custom_op with mutates_args=()); torch_op entry points always return theirs
    returns: bool = False
    # compute-sanitizer tools not run on this version, each with the reason the learner reads: synccheck does not
    # model Hopper's warp-specialised kernels (named barriers a producer warpgroup skips, setmaxnreg) and
    # reports "divergent threads" on correct ThunderKittens GEMMs; the other tools still run
    sanitizer_skip: dict[str, str] = field(default_factory=dict)
    # this version's own work model, overriding [performance]'s flops / bytes: versions of one folder that do
    # different work on the same cases (attention_patterns: the key-query pairs a sliding window sees, or a
    # document mask's), so each version's TFLOP/s and calibrated estimate count its own work
    flops: str | None = None
    bytes: str | None = None
    summary: str = ""  # what the version teaches, one line (docs/exercises.md's "what"; scripts/gen_docs.py)
    measured: str = ""  # what its solution measured on a GPU (docs/exercises.md's last column)

    @property
    def kind_of(self) -> Kind:
        """What this version's kind means (grader/kinds/)."""
        return KINDS[self.kind]

    @property
    def language(self) -> str:
        """cuda or triton, whatever the version's name."""
        return self.kind_of.lang

    @property
    def returns_outputs(self) -> bool:
        return self.kind_of.returns_outputs or self.returns

    def accepts(self, case: "Case") -> bool:
        """Whether this version runs `case` (its dtype is one the version takes)."""
        return self.dtypes is None or case.dtype in self.dtypes


@dataclass
class Case:
    params: dict[str, Any]
    gpu_only: bool = False
    # per tensor: values (init, scale, offset, special) and layout (row_slice, transposed, interleaved); see inputs.py
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    trials: int | None = None  # None: the spec's `trials`
    sanitize: bool = False  # the case compute-sanitizer runs on (default: sanitize.small_case picks one)
    op_checks: bool = False  # the cases whose first trial runs the [checks] of a registered operator (op_checks.py)
    # the [tolerance.<name>] table that judges this case's outputs (those without their own table): for a case
    # whose exact answer is a float32 rounding error away from any honest kernel's, e.g. a gradient p - 1 at p = 1
    tolerance: str | None = None

    @property
    def dtype(self) -> str:
        return self.params.get("dtype", DEFAULT_DTYPE)

    def label(self) -> str:
        text = " ".join(f"{k}={v}" for k, v in self.params.items())
        notes = [
            f"{name} " + " ".join(f"{k}={v}" for k, v in options.items())
            for name, options in {**self.inputs, **self.outputs}.items()
        ]
        return text + (f" ({'; '.join(notes)})" if notes else "")


def shape_of(tensor: TensorSpec, case: Case) -> list[int]:
    """A tensor's shape at `case`. Here, not in inputs.py, so that loading specs never imports torch."""
    from grader.core import exprs

    return [exprs.evaluate_int(dim, case.params) for dim in tensor.shape]


# unit roundoff per dtype: the rounding of one operation, the step of accumulated error
UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}


@dataclass
class Tolerance:
    """|got - expected| <= atol + rtol_for(case) * |expected|.

    `accumulate` (an expression of the case, e.g. "n") is the number of values summed into one output
    element: summed in any order in float32, the rounding error grows like sqrt(n) * u (a random walk of
    n roundings of size u, the unit roundoff), so rtol grows with it: max(rtol, 2 sqrt(n) u). A fixed rtol
    would fail an honest per-block-atomics sum at 2^28 elements and pass a sloppy one at 4097."""

    atol: float
    rtol: float
    accumulate: str | None = None

    def rtol_for(self, params: dict[str, Any], dtype: str) -> float:
        if not self.accumulate:
            return self.rtol
        from grader.core import exprs

        n = max(1.0, float(exprs.evaluate(self.accumulate, params)))
        return max(self.rtol, 2 * n**0.5 * UNIT_ROUNDOFF.get(dtype, 2.0**-24))


@dataclass
class Performance:
    cases: list[Case]
    threshold: float  # learner speed / solution speed needed to pass
    bytes: str | None = None
    flops: str | None = None
    bound: str = ""  # "memory" (report GB/s against copy bandwidth) or "compute" (TFLOP/s against matmul peak)
    # Peak GPU memory the entry point may allocate beyond its inputs and outputs, an expression of the
    # case like `bytes` ("4 * B * H * N * d"); checked at every timed size (grader/checks/memory.py).
    max_extra_bytes: str | None = None
    memory_hint: str = ""  # what the limit means, for the failure message ("O(N): do not materialise ...")
    # Case parameters that turn the learner's own entry point into a baseline timed beside it (a streams
    # exercise: { n_streams = 1 }, the same work done serially); reported as a speedup, never a verdict.
    baseline_args: dict[str, Any] = field(default_factory=dict)

    @property
    def is_compute_bound(self) -> bool:
        return self.bound == "compute" or (not self.bound and self.flops is not None and self.bytes is None)


@dataclass
class Mistake:
    """A classic mistake of the exercise (`[[mistakes]]` in spec.toml): how its first failing check shows, and
    the hint that check gets. Every matcher given must hold (hints.exercise_hint); one left out matches anything.
    Tried before the grader's generic hints. Without a hint the entry only declares the mistake (and its fixture
    is tested): for a mistake a generic hint already answers well (softmax's row stride taken as N)."""

    name: str
    hint: str | None
    check: str | None = None  # the failing check's name: numerics, run, load, build, speed, sanitizer, ...
    code: list[str] = field(default_factory=list)  # any of these check.details["code"] (mismatch, partial_write, ...)
    # any of these in the failing case's label ("M=1 N=1", "x offset=1000.0", "layout=row_slice"), whole words:
    # "N=1" matches "M=1 N=1" but not "N=1025"
    first_case: list[str] = field(default_factory=list)
    nan: bool | None = None  # true: the output has NaN or inf where the reference is finite; false: it has none
    message: str | None = None  # a regular expression searched for in the check's message
    lang: str | None = None  # a variant's name or a language (triton, cuda); None: every version
    # the file in tests/fixtures/submissions/ that makes this mistake (tests/test_exercise_mistakes.py grades it
    # and expects these matchers and this hint); only a name: fixtures do not ship to learners
    fixture: str | None = None
    # where that test grades the fixture: "cpu" (the Triton interpreter or the CUDA emulator; every matcher must
    # hold) and "gpu" (the failing check and its code must); the hints ignore tiers and match gpu_code on a GPU
    tiers: list[str] = field(default_factory=lambda: ["cpu"])
    gpu_code: list[str] = field(default_factory=list)  # the code(s) a GPU's grade gets, where not `code`'s


TIERS = ("cpu", "gpu")


def case_word(text: str) -> "re.Pattern[str]":
    """`text` as whole words of a case label: "N=1" finds "M=1 N=1" and "N=1 dtype=float16", not "N=1025"."""
    return re.compile(r"(?<![\w.=])" + re.escape(text.strip()) + r"(?![\w.])")


@dataclass
class ExerciseSpec:
    id: str
    title: str
    folder: Path
    variants: dict[str, Variant]
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    cases: list[Case]
    tolerance: dict[str, Tolerance]
    performance: Performance
    trials: int = 2
    tuning: dict[str, dict[str, list]] = field(default_factory=dict)  # per language: keyword -> values to try
    scoring: dict[str, float] = field(default_factory=lambda: {"numerics": 7.0, "speed": 3.0})
    topic: str = ""
    default_lang: str | None = None  # the version `kcourse grade <id>` picks without --lang (None: ask)
    reference_device: str = "cpu"  # "cuda": float64 references and transforms on the GPU where one is (heavy.py)
    checks: Any = None  # op_spec.OpChecks: [checks] custom_op, an operator registered with torch.library (op_checks.py)
    mistakes: list[Mistake] = field(default_factory=list)  # [[mistakes]]: the exercise's own hints, tried first

    def variant(self, lang: str | None) -> Variant:
        if lang is None:
            if len(self.variants) == 1:
                return next(iter(self.variants.values()))
            if self.default_lang is not None:
                return self.variants[self.default_lang]
            raise SpecError(
                f"{self.id} exists in {' and '.join(sorted(self.variants))}: add --lang "
                + "|".join(sorted(self.variants))
            )
        if lang not in self.variants:
            return self._variant_in_language(lang)
        return self.variants[lang]

    def _variant_in_language(self, language: str) -> Variant:
        """`--lang cuda` (or a .cu file) for an exercise whose versions are named otherwise (add2's jit, setup,
        cmake): its default version if that one is in the language, else its only version in it."""
        same = [v for v in self.variants.values() if v.language == language]
        default = self.variants.get(self.default_lang or "")
        if default is not None and default.language == language:
            return default
        if len(same) == 1:
            return same[0]
        if same:  # several versions in the language (activations' gelu_erf, gelu_tanh, ...): name them
            raise SpecError(
                f"{self.id} has {len(same)} {language} versions: add --lang " + "|".join(sorted(v.lang for v in same))
            )
        raise SpecError(
            f"{self.id} has no {language} version; it has: {', '.join(sorted(self.variants))}: "
            f"pick one with --lang {'|'.join(sorted(self.variants))}"
        )

    def tolerance_for(self, dtype: str) -> Tolerance:
        if dtype not in self.tolerance:
            raise SpecError(f"{self.folder / 'spec.toml'}: no [tolerance.{dtype}] for a {dtype} case")
        return self.tolerance[dtype]

    def tolerance_of(self, case: Case, output: TensorSpec | None = None) -> Tolerance:
        """The tolerance that applies to this case (rtol grown with the accumulation length), or to one output
        of it: an output naming its own table (`tolerance = "name"`) is judged by that table, its rtol grown
        with the unit roundoff of the output's own dtype."""
        if output is not None and output.tolerance is not None:
            dtype = output.dtype or case.dtype
            tol = self.tolerance[output.tolerance]
        elif case.tolerance is not None:
            dtype = case.dtype
            tol = self.tolerance[case.tolerance]
        else:
            dtype = case.dtype
            tol = self.tolerance_for(dtype)
        return Tolerance(tol.atol, tol.rtol_for(case.params, dtype))

    def trials_for(self, case: Case) -> int:
        return case.trials if case.trials is not None else self.trials


_parsed: dict[Path, tuple[str, bytes]] = {}  # a spec.toml -> its text when last read, and its tables pickled


def _read_toml(path: Path) -> dict:
    """spec.toml's tables. Discovery reads every spec on each resolve (a tenth of a second, mostly TOML parsing), so
    the parse is kept per process and file while the file's text is the same: an edited spec parses again. Each
    call gets its own copy."""
    text = path.read_text()
    if path not in _parsed or _parsed[path][0] != text:
        _parsed[path] = (text, pickle.dumps(tomllib.loads(text)))
    return pickle.loads(_parsed[path][1])


def load_spec(folder: Path) -> ExerciseSpec:
    path = folder / "spec.toml"
    try:
        data = _read_toml(path)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SpecError(f"{path}: {exc}") from exc
    try:
        return _parse(data, folder)
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, SpecError):
            raise
        raise SpecError(f"{path}: {type(exc).__name__}: {exc}") from exc


def _parse(data: dict[str, Any], folder: Path) -> ExerciseSpec:
    path = folder / "spec.toml"
    check_keys(data, str(path))  # a key no table takes (spec_keys.py lists them) is refused, not ignored
    variants = {lang: _variant(lang, raw, folder) for lang, raw in data["variants"].items()}
    inputs = [_tensor(name, raw, path) for name, raw in data.get("inputs", {}).items()]
    outputs = [_tensor(name, raw, path, output=True) for name, raw in data["outputs"].items()]
    perf = data.get("performance", {})
    spec = ExerciseSpec(
        id=data["id"],
        title=data.get("title", data["id"]),
        folder=folder,
        variants=variants,
        inputs=inputs,
        outputs=outputs,
        cases=[_case(c) for c in data["cases"]],
        tolerance={
            k: Tolerance(float(v["atol"]), float(v["rtol"]), v.get("accumulate")) for k, v in data["tolerance"].items()
        },
        performance=_performance(perf),
        tuning={lang: dict(params) for lang, params in data.get("tuning", {}).items()},
        trials=int(data.get("trials", 2)),
        scoring={k: float(v) for k, v in data.get("scoring", {"numerics": 7, "speed": 3}).items()},
        topic=data.get("topic", ""),
        default_lang=data.get("default_lang"),
        reference_device=data.get("reference_device", "cpu"),
        checks=op_spec.parse(data.get("checks"), str(path)),
        mistakes=_mistakes(data.get("mistakes", []), path),
    )
    _validate(spec, path)
    return spec


def _variant(lang: str, raw: dict[str, Any], folder: Path) -> Variant:
    """One [variants.<lang>] table: its kind must be known (kinds/), the rest as spec_keys.py describes."""
    path = folder / "spec.toml"
    kind = raw.get("kind", lang)
    if kind not in KINDS:
        raise SpecError(
            f"{path}: variants.{lang}.kind = {kind!r}; known kinds: "
            + "; ".join(f"{k.name} ({k.entry})" for k in KINDS.values())
        )
    return Variant(
        lang=_variant_name(lang, kind, path),
        kind=kind,
        stub=raw["stub"],
        entry=raw["entry"],
        args=[_argument(a) for a in raw["args"]],
        timeout_s=float(raw.get("timeout_s", 60)),
        host_memory=raw.get("host_memory", "pageable"),
        dtypes=list(raw["dtypes"]) if "dtypes" in raw else None,
        link=_libraries(raw.get("link", []), kind, f"{path}: variants.{lang}.link"),
        requires=_requirements(raw.get("requires", []), kind, f"{path}: variants.{lang}.requires"),
        build=raw.get("build", "jit"),
        files=[folder / name for name in raw.get("files", [])],
        reference=_reference_name(raw.get("reference", "reference"), folder, f"{path}: variants.{lang}.reference"),
        returns=bool(raw.get("returns", False)),
        sanitizer_skip=_sanitizer_skip(raw.get("sanitizer_skip", {}), f"{path}: variants.{lang}.sanitizer_skip"),
        flops=raw.get("flops"),
        bytes=raw.get("bytes"),
        summary=str(raw.get("summary", "")),
        measured=str(raw.get("measured", "")),
    )


def _performance(perf: dict[str, Any]) -> Performance:
    """[performance]: the timed sizes and what the speed and memory verdicts are taken against."""
    return Performance(
        cases=[_case(c) for c in perf.get("cases", [])],
        threshold=float(perf.get("threshold", 0.5)),
        bytes=perf.get("bytes"),
        flops=perf.get("flops"),
        bound=perf.get("bound", ""),
        max_extra_bytes=perf.get("max_extra_bytes"),
        memory_hint=perf.get("memory_hint", ""),
        baseline_args=dict(perf.get("baseline_args", {})),
    )


def _mistakes(entries: Any, path: Path) -> list[Mistake]:
    """`[[mistakes]]`: each a name, a hint (optional) and at least one matcher besides check and lang (see Mistake)."""
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise SpecError(
            f"{path}: mistakes must be an array of tables: write each as [[mistakes]] with name, hint and matchers"
        )
    mistakes: list[Mistake] = []
    for number, raw in enumerate(entries, 1):
        where = f"{path}: [[mistakes]] #{number}" + (f" ({raw['name']})" if isinstance(raw.get("name"), str) else "")
        mistake = _mistake(raw, where)
        if any(m.name == mistake.name for m in mistakes):
            raise SpecError(f"{where}: a second mistake named {mistake.name!r}: names are unique")
        mistakes.append(mistake)
    return mistakes


def _mistake(raw: dict[str, Any], where: str) -> Mistake:
    """One [[mistakes]] entry, its keys checked (_check_mistake_values) and at least one matcher given."""
    _check_mistake_values(raw, where)
    tiers, gpu_code = _tiers(raw, where)
    hint = raw.get("hint")
    mistake = Mistake(
        name=raw["name"],
        hint=hint.strip() if hint else None,
        check=raw.get("check"),
        code=_strings(raw, "code", where),
        first_case=_strings(raw, "first_case", where),
        nan=raw.get("nan"),
        message=raw.get("message"),
        lang=raw.get("lang"),
        fixture=raw.get("fixture"),
        tiers=tiers,
        gpu_code=gpu_code,
    )
    if not (mistake.code or mistake.first_case or mistake.nan is not None or mistake.message):
        raise SpecError(
            f"{where}: give at least one of code, first_case, nan, message: a mistake matched by its "
            "check alone would take the hint of every failure"
        )
    return mistake


def _check_mistake_values(raw: dict[str, Any], where: str) -> None:
    """Known keys only; a name fit for a test id, a hint with text, non-empty strings, a boolean nan, a known check
    name and failure code, a message that compiles as a regular expression."""
    unknown = sorted(set(raw) - set(MISTAKE_KEYS))
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(MISTAKE_KEYS)}")
    name, hint = raw.get("name"), raw.get("hint")
    if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9][a-z0-9_]*", name):
        raise SpecError(f"{where}: name = {name!r}: name the mistake in lower case letters, digits and _ (n_minus_1)")
    if hint is not None and (not isinstance(hint, str) or not hint.strip()):
        raise SpecError(
            f"{where}: hint = {hint!r}: give the text the learner reads under the failing check (or "
            "leave hint out where the grader's generic hint says it)"
        )
    for key in ("check", "message", "lang", "fixture"):
        if key in raw and (not isinstance(raw[key], str) or not raw[key].strip()):
            raise SpecError(f"{where}: {key} = {raw[key]!r}: give a non-empty string")
    if "nan" in raw and not isinstance(raw["nan"], bool):
        raise SpecError(f"{where}: nan = {raw['nan']!r}: true (NaN or inf in the output) or false (none)")
    _known(raw, "check", CheckName, where)
    _known(raw, "code", Code, where)
    if "message" in raw:
        try:
            re.compile(raw["message"])
        except re.error as exc:
            raise SpecError(f"{where}: message = {raw['message']!r} is not a regular expression: {exc}") from None


def _tiers(raw: dict[str, Any], where: str) -> tuple[list[str], list[str]]:
    """`tiers` and `gpu_code`: where the mistake's fixture is graded (tests only), and a GPU's code where it differs."""
    tiers = _strings(raw, "tiers", where) if "tiers" in raw else ["cpu"]
    if not tiers or set(tiers) - set(TIERS) or len(set(tiers)) < len(tiers):
        raise SpecError(
            f'{where}: tiers = {raw["tiers"]!r}: give ["cpu"] (the Triton interpreter or the CUDA '
            'emulator), ["gpu"] (a mistake only a GPU shows), or both, each once'
        )
    if ("tiers" in raw or "gpu_code" in raw) and "fixture" not in raw:
        raise SpecError(
            f'{where}: tiers and gpu_code say where and how its fixture fails: give fixture = "<its file '
            'in tests/fixtures/submissions/>"'
        )
    _known(raw, "gpu_code", Code, where)
    gpu_code = _strings(raw, "gpu_code", where)
    if gpu_code and "gpu" not in tiers:
        raise SpecError(
            f'{where}: gpu_code = {raw["gpu_code"]!r}, but tiers = {tiers!r} has no "gpu": add "gpu" '
            "to tiers, or leave gpu_code out"
        )
    if "gpu" in tiers and not (gpu_code or raw.get("code")):
        raise SpecError(
            f'{where}: tiers has "gpu", where the grade is checked by its code: give code (or '
            "gpu_code, where a GPU's differs)"
        )
    return tiers, gpu_code


def _known(raw: dict[str, Any], key: str, vocabulary: type[Vocab], where: str) -> None:
    """A mistake's `check` or `code` must be one the grader gives (grader/core/vocabulary.py): a misspelt one
    would never match, and its hint would never show."""
    given = raw.get(key, [])
    for value in [given] if isinstance(given, str) else given if isinstance(given, list) else []:
        if isinstance(value, str) and value not in vocabulary.values():
            close = difflib.get_close_matches(value, vocabulary.values(), n=1)
            also = f"did you mean {close[0]!r}? " if close else ""
            raise SpecError(
                f"{where}: {key} = {value!r} is not a {key} the grader gives: {also}the list is "
                f"grader/core/vocabulary.py's {vocabulary.__name__}"
            )


def _strings(raw: dict[str, Any], key: str, where: str) -> list[str]:
    """A string or a list of strings (any of them matches)."""
    value = raw.get(key, [])
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(v, str) and v.strip() for v in values):
        raise SpecError(f"{where}: {key} = {value!r}: give a string or a list of strings")
    return [v.strip() for v in values]


def _validate_mistakes(spec: ExerciseSpec, path: Path) -> None:
    """A mistake's first_case must name some case (a typo would silently never match), its lang a version."""
    labels = [c.label() for c in spec.cases + spec.performance.cases]
    languages = set(spec.variants) | {v.language for v in spec.variants.values()}
    for mistake in spec.mistakes:
        where = f"{path}: [[mistakes]] {mistake.name}"
        for text in mistake.first_case:
            if not any(case_word(text).search(label) for label in labels):
                raise SpecError(
                    f"{where}: first_case = {text!r} is in no case's label (whole words, as "
                    f'"M=1 N=1" or "x offset=1000.0"); the labels: {"; ".join(labels)}'
                )
        if mistake.lang is not None and mistake.lang not in languages:
            raise SpecError(f"{where}: lang = {mistake.lang!r}; this exercise has: {', '.join(sorted(languages))}")


_LIBRARY_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_+.-]*$")  # as -l takes it: "cublas", not "-lcublas"


def _libraries(names: Any, kind: str, where: str) -> list[str]:
    """`link = ["cublas"]`: names as `-l` takes them (no `lib` prefix, no `.so`), for nvcc-built kinds."""
    if not isinstance(names, list) or not all(isinstance(n, str) and _LIBRARY_NAME.match(n) for n in names):
        raise SpecError(f'{where} = {names!r}: give a list of library names as -l takes them, e.g. ["cublas"]')
    if names and kind not in NVCC_KINDS:
        raise SpecError(
            f'{where}: only kinds "cuda" and "cuda_host" link libraries (a torch_op is built by '
            "torch's extension builder, which links torch's own): remove it"
        )
    return list(names)


REQUIREMENTS = (
    "thunderkittens",
)  # what `requires` may name: libraries found through a setting (build.requirement_options)


def _requirements(names: Any, kind: str, where: str) -> list[str]:
    """`requires = ["thunderkittens"]`: known names, on kinds the kit builds with nvcc itself."""
    if not isinstance(names, list) or any(n not in REQUIREMENTS for n in names):
        raise SpecError(f"{where} = {names!r}: give a list of {', '.join(REQUIREMENTS)}")
    if names and kind not in NVCC_KINDS:
        raise SpecError(
            f'{where}: only kinds "cuda" and "cuda_host" take requires (the kit builds them with nvcc): '
            "remove it, or make the variant one of those kinds"
        )
    return list(names)


SANITIZER_TOOLS = ("racecheck", "synccheck", "memcheck", "initcheck")


def _sanitizer_skip(table: Any, where: str) -> dict[str, str]:
    """`sanitizer_skip = { synccheck = "why" }`: known tools, each with a reason the grade shows."""
    if not isinstance(table, dict) or any(
        t not in SANITIZER_TOOLS or not isinstance(why, str) or not why.strip() for t, why in table.items()
    ):
        raise SpecError(
            f'{where} = {table!r}: give {{ TOOL = "why it is not run" }} with TOOL one of {", ".join(SANITIZER_TOOLS)}'
        )
    return dict(table)


def _reference_name(name: Any, folder: Path, where: str) -> str:
    """`reference = "gelu_tanh"`: a function defined at the top of the exercise's reference.py (read, not run:
    loading a spec imports no torch)."""
    import ast

    if not (isinstance(name, str) and name.isidentifier()):
        raise SpecError(f"{where} = {name!r}: name a function defined in reference.py")
    source = folder / "reference.py"
    if name != "reference" and source.is_file():
        defined = {n.name for n in ast.parse(source.read_text()).body if isinstance(n, ast.FunctionDef)}
        if name not in defined:
            raise SpecError(
                f"{where} = {name!r} is not a function of {source}: define `def {name}(...)` there, or fix the name"
            )
    return name


def _variant_name(name: str, kind: str, path: Path) -> str:
    """A version's key names it; a key that is a language must be that version's language."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise SpecError(
            f"{path}: [variants.{name}]: name a version in lower case letters, digits and _ (cuda, triton, jit)"
        )
    if name in LANG_OF_KIND.values() and name != LANG_OF_KIND[kind]:
        raise SpecError(
            f"{path}: [variants.{name}] has kind {kind!r}, a {LANG_OF_KIND[kind]} kind: name it "
            f"{LANG_OF_KIND[kind]}, or give it a name that is not a language"
        )
    return name


_STRIDE_ARGUMENT = re.compile(r"^(?P<tensor>\w+)\.stride\((?P<dim>-?\d+)\)$")


def _argument(text: str) -> Argument:
    name, _, ctype = text.partition(":")
    stride = _STRIDE_ARGUMENT.match(name)
    if stride:
        return Argument(name=name, ctype=ctype or None, stride_of=stride["tensor"], stride_dim=int(stride["dim"]))
    return Argument(name=name, ctype=ctype or None)


def _tensor(name: str, raw: dict[str, Any], path: Path, output: bool = False) -> TensorSpec:
    tensor = TensorSpec(
        name=name,
        shape=list(raw["shape"]),
        dtype=raw.get("dtype"),
        init=raw.get("init", "normal"),
        transform=raw.get("transform"),
        check=raw.get("check"),
        tolerance=raw.get("tolerance"),
    )
    if tensor.tolerance is not None and not output:
        raise SpecError(f"{path}: inputs.{name}.tolerance: only outputs are judged; remove it")
    if tensor.dtype is not None and tensor.dtype not in DTYPES:
        raise SpecError(f"{path}: {name}.dtype = {tensor.dtype!r}; known: {', '.join(DTYPES)}")
    if tensor.init not in INITS:
        raise SpecError(f"{path}: {name}.init = {tensor.init!r}; known: {', '.join(INITS)}")
    if tensor.transform is not None and not str(tensor.transform).isidentifier():
        raise SpecError(f"{path}: {name}.transform = {tensor.transform!r}: name a function defined in reference.py")
    if tensor.check is not None and not (output and str(tensor.check).isidentifier()):
        raise SpecError(
            f"{path}: {name}.check = {tensor.check!r}: an output's check names a function defined in "
            "reference.py" + ("" if output else "; inputs have no check: remove it")
        )
    return tensor


LAYOUTS = ("contiguous", "row_slice", "transposed", "interleaved")
SPECIALS = ("neg_inf_entries", "neg_inf_rows", "large")


def _case(raw: dict[str, Any]) -> Case:
    params = {k: v for k, v in raw.items() if k not in CASE_KEYS}
    trials = raw.get("trials")
    return Case(
        params=params,
        gpu_only=bool(raw.get("gpu_only", False)),
        inputs=dict(raw.get("inputs", {})),
        outputs=dict(raw.get("outputs", {})),
        trials=int(trials) if trials is not None else None,
        sanitize=bool(raw.get("sanitize", False)),
        op_checks=bool(raw.get("op_checks", False)),
        tolerance=raw.get("tolerance"),
    )


def _validate_case_tensors(spec: "ExerciseSpec", case: Case, path: Path) -> None:
    names = {"inputs": {t.name for t in spec.inputs}, "outputs": {t.name for t in spec.outputs}}
    for kind, table in (("inputs", case.inputs), ("outputs", case.outputs)):
        for name, options in table.items():
            if name not in names[kind]:
                raise SpecError(f"{path}: case {case.label()}: {kind}.{name} is not one of the spec's {kind}")
            if options.get("layout", "contiguous") not in LAYOUTS:
                raise SpecError(f"{path}: {kind}.{name}.layout = {options['layout']!r}; known: {', '.join(LAYOUTS)}")
            tensor = next(t for t in (spec.inputs if kind == "inputs" else spec.outputs) if t.name == name)
            if options.get("layout") == "interleaved" and len(tensor.shape) < 3:
                raise SpecError(
                    f"{path}: {kind}.{name}.layout = 'interleaved' swaps dimensions 1 and 2 in memory: "
                    f"{name} has {len(tensor.shape)}; use row_slice or transposed"
                )
            if options.get("special") and options["special"] not in SPECIALS:
                raise SpecError(f"{path}: {kind}.{name}.special = {options['special']!r}; known: {', '.join(SPECIALS)}")
            if options.get("init") and options["init"] not in INITS:
                raise SpecError(f"{path}: {kind}.{name}.init = {options['init']!r}; known: {', '.join(INITS)}")
            if "transform" in options and not (kind == "inputs" and str(options["transform"]).isidentifier()):
                raise SpecError(
                    f"{path}: {kind}.{name}.transform = {options['transform']!r}: an input's transform names a "
                    "function defined in reference.py" + ("" if kind == "inputs" else "; outputs have none")
                )


def _validate(spec: ExerciseSpec, path: Path) -> None:
    if not spec.cases:
        raise SpecError(f"{path}: at least one [[cases]] entry is needed")
    if spec.id != spec.folder.name:
        raise SpecError(f"{path}: id {spec.id!r} differs from its folder name {spec.folder.name!r}")
    tensors = {t.name: t for t in spec.inputs + spec.outputs}
    for variant in spec.variants.values():
        for arg in variant.args:
            if arg.stride_of is not None:
                _validate_stride_argument(arg, tensors, variant, path)
                continue
            is_param = all(arg.name in c.params for c in spec.cases)
            if arg.name not in tensors and not is_param:
                raise SpecError(
                    f"{path}: argument {arg.name!r} of {variant.lang} is neither a tensor nor a case parameter"
                )
        _validate_variant_dtypes(spec, variant, path)
    if spec.reference_device not in ("cpu", "cuda"):
        raise SpecError(
            f'{path}: reference_device = {spec.reference_device!r}: use "cpu" (the default) or "cuda" '
            "(float64 references on the GPU where one is, for references too slow on the CPU)"
        )
    if spec.default_lang is not None and spec.default_lang not in spec.variants:
        raise SpecError(
            f"{path}: default_lang = {spec.default_lang!r} is not one of its variants "
            f"({', '.join(sorted(spec.variants))}): name one of them, or remove default_lang"
        )
    for out in spec.outputs:
        if out.tolerance is not None and out.tolerance not in spec.tolerance:
            raise SpecError(
                f"{path}: outputs.{out.name}.tolerance = {out.tolerance!r} names no table: add "
                f"[tolerance.{out.tolerance}] with atol and rtol, or remove the key"
            )
    for case in spec.cases + spec.performance.cases:
        spec.tolerance_for(case.dtype)
        if case.tolerance is not None and case.tolerance not in spec.tolerance:
            raise SpecError(
                f"{path}: case {case.label()}: tolerance = {case.tolerance!r} names no table: add "
                f"[tolerance.{case.tolerance}] with atol and rtol, or remove the key"
            )
        _validate_case_tensors(spec, case, path)
    _validate_memory_limit(spec, path)
    _validate_work_models(spec, path)
    _validate_host_options(spec, path)
    _validate_in_place(spec, path)
    _validate_mistakes(spec, path)
    for variant in spec.variants.values():
        _validate_build_options(variant, path)
    _validate_op_checks(spec, path)


def _validate_stride_argument(arg: Argument, tensors: dict[str, TensorSpec], variant: Variant, path: Path) -> None:
    tensor = tensors.get(arg.stride_of)
    if tensor is None:
        raise SpecError(
            f"{path}: argument {arg.name!r} of {variant.lang}: {arg.stride_of!r} is not a tensor of the spec"
        )
    if not -len(tensor.shape) <= arg.stride_dim < len(tensor.shape):
        raise SpecError(
            f"{path}: argument {arg.name!r} of {variant.lang}: {arg.stride_of} has {len(tensor.shape)} "
            f"dimension(s); give a dimension from 0 to {len(tensor.shape) - 1}"
        )


def _validate_variant_dtypes(spec: ExerciseSpec, variant: Variant, path: Path) -> None:
    """A version's dtypes must be known, leave it some case, and take every timed size (the speed verdict)."""
    if variant.dtypes is None:
        return
    unknown = [d for d in variant.dtypes if d not in DTYPES]
    if unknown:
        raise SpecError(f"{path}: variants.{variant.lang}.dtypes has {', '.join(unknown)}; known: {', '.join(DTYPES)}")
    if not any(variant.accepts(c) for c in spec.cases):
        raise SpecError(
            f"{path}: variants.{variant.lang}.dtypes = {variant.dtypes} leaves it no [[cases]] entry: "
            "add a case in one of those dtypes"
        )
    untimed = [c.label() for c in spec.performance.cases if not variant.accepts(c)]
    if untimed:
        raise SpecError(
            f"{path}: variants.{variant.lang}.dtypes = {variant.dtypes} excludes the timed size(s) "
            f"{', '.join(untimed)}: every version is timed at every [[performance.cases]] entry"
        )


def _validate_memory_limit(spec: ExerciseSpec, path: Path) -> None:
    """A limit that names no case dimension would only fail when the GPU grades it: say so at load."""
    limit = spec.performance.max_extra_bytes
    if limit is None:
        return
    from grader.core import exprs

    if not spec.performance.cases:
        raise SpecError(
            f"{path}: performance.max_extra_bytes needs [[performance.cases]]: memory is measured at the timed sizes"
        )
    for case in spec.performance.cases:
        try:
            exprs.evaluate(limit, {**case.params, "elem": 1})
        except (ValueError, SyntaxError) as exc:
            raise SpecError(f"{path}: performance.max_extra_bytes = {limit!r}: {exc}") from None


def _validate_work_models(spec: ExerciseSpec, path: Path) -> None:
    """A version's own flops / bytes, evaluated at every timed size: a wrong name would only fail on a GPU."""
    from grader.core import exprs

    for variant in spec.variants.values():
        for key in ("flops", "bytes"):
            expression = getattr(variant, key)
            for case in spec.performance.cases if expression is not None else []:
                try:
                    exprs.evaluate(expression, {**case.params, "elem": 1})
                except (ValueError, SyntaxError) as exc:
                    raise SpecError(f"{path}: variants.{variant.lang}.{key} = {expression!r}: {exc}") from None


def _validate_host_options(spec: ExerciseSpec, path: Path) -> None:
    """host_memory and baseline_args: wrong ones would only show when a GPU grades the exercise."""
    for variant in spec.variants.values():
        if variant.host_memory not in HOST_MEMORY:
            raise SpecError(
                f"{path}: variants.{variant.lang}.host_memory = {variant.host_memory!r}; known: {', '.join(HOST_MEMORY)}"
            )
        if variant.host_memory != "pageable" and not variant.kind_of.host_side:
            raise SpecError(
                f'{path}: variants.{variant.lang}.host_memory applies to kind "cuda_host" only (the other '
                "kinds get device arrays): remove it from this variant"
            )
    unknown = [k for k in spec.performance.baseline_args if any(k not in c.params for c in spec.performance.cases)]
    if unknown:
        raise SpecError(
            f"{path}: performance.baseline_args names {', '.join(unknown)}, which is not a parameter of every "
            "[[performance.cases]] entry: add it to each, or remove it from baseline_args"
        )


BUILDS = {"jit": None, "setup": "setup.py", "cmake": "CMakeLists.txt"}  # how a torch_op is built, the file it needs


def _validate_build_options(variant: Variant, path: Path) -> None:
    """build and files: mistakes here would only show when a GPU grades the exercise."""
    where = f"{path}: variants.{variant.lang}"
    if variant.build not in BUILDS:
        raise SpecError(f"{where}.build = {variant.build!r}; known: {', '.join(BUILDS)}")
    if (variant.build != "jit" or variant.files) and not variant.kind_of.builds_in_child:
        raise SpecError(
            f'{where}: build and files apply to kind "torch_op" (a raw CUDA file is built alone): remove them'
        )
    missing = [f.name for f in variant.files if not f.is_file()]
    if missing:
        raise SpecError(
            f"{where}.files: {', '.join(missing)} not found in {path.parent}: add the file(s) or fix the names"
        )
    if any(f.name == variant.stub for f in variant.files):
        raise SpecError(f"{where}.files lists the stub {variant.stub}: files are the given ones beside it; remove it")
    needed = BUILDS[variant.build]
    if needed and needed not in {f.name for f in variant.files}:
        raise SpecError(f"{where}: build = {variant.build!r} needs {needed} in files")


def _validate_in_place(spec: ExerciseSpec, path: Path) -> None:
    """An output named like an input is that input updated in place (inputs.in_place_names): the same tensor,
    so the same shape and dtype."""
    inputs = {t.name: t for t in spec.inputs}
    for out in spec.outputs:
        source = inputs.get(out.name)
        if source is not None and (source.shape != out.shape or source.dtype != out.dtype):
            raise SpecError(
                f"{path}: outputs.{out.name} has the name of an input, so it is that input updated in "
                f"place, but its shape/dtype ({out.shape}, {out.dtype or 'the case dtype'}) differ from "
                f"inputs.{out.name}'s ({source.shape}, {source.dtype or 'the case dtype'}): make them the "
                "same, or rename the output"
            )


# --- [checks]: the operator's checks (op_spec.py parses the table; op_checks.py runs them) ----------


def _validate_op_checks(spec, path) -> None:
    """[checks] and the cases' op_checks marks go together, on Python entry points that return their outputs."""
    marked = [c for c in spec.cases if c.op_checks]
    if spec.checks is None:
        if marked:
            raise SpecError(
                f"{path}: case {marked[0].label()} has op_checks = true but the spec has no [checks] "
                "custom_op: add one, or remove the mark"
            )
        return
    if not [c for c in marked if not c.gpu_only]:
        raise SpecError(
            f"{path}: [checks] runs on the cases marked op_checks = true: mark at least one case that "
            "also runs on the CPU (not gpu_only)"
        )
    for variant in spec.variants.values():
        if not variant.kind_of.python_entry or not variant.returns:
            raise SpecError(
                f'{path}: variants.{variant.lang}: [checks] needs a Python entry point (kind = "triton") with '
                "returns = true (the checks call it from Python and use the operator's output)"
            )
    if spec.checks.gradcheck and not any(gradcheck_small(spec, c) for c in marked if not c.gpu_only):
        raise SpecError(
            f"{path}: [checks] gradcheck = true runs on marked cases of at most {op_spec.GRADCHECK_ELEMENTS} input "
            "elements: mark a tiny case op_checks = true (e.g. M = 3, N = 5)"
        )


def gradcheck_small(spec, case) -> bool:
    """Whether gradcheck runs on this case: its floating inputs hold at most op_spec.GRADCHECK_ELEMENTS elements.
    (spec.shape_of, not inputs': spec loading must not import torch, or `kcourse grade` would pay torch's
    import before it starts the worker whose own start-up is meant to overlap it.)"""
    return sum(math.prod(shape_of(t, case)) for t in spec.inputs) <= op_spec.GRADCHECK_ELEMENTS

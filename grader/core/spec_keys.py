"""The keys of spec.toml, table by table: each key's type, default and meaning, in one place that both the parser
and the docs read.

spec.py parses the tables and refuses a key they do not list (`check_keys`; `[[mistakes]]` in spec.py's own
loop), so a misspelt key (`timeout = 60`) fails at load instead of silently keeping its default;
scripts/gen_docs.py writes docs/spec-keys.md from these tables, so the reference and the parser cannot drift.
Pure data: no torch, nothing of the grader's beyond its errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grader.core.errors import SpecError

REQUIRED = "required"


@dataclass(frozen=True)
class Key:
    name: str
    type: str  # as written in TOML: "string", "integer", "array of strings", "table", ...
    default: str  # REQUIRED, or what holds when the key is left out (TOML text, or words)
    description: str  # one line, for docs/spec-keys.md


@dataclass(frozen=True)
class Table:
    name: str  # as it is written in spec.toml: "[variants.<name>]"
    keys: tuple[Key, ...]
    about: str  # one line: what the table is, and what else it holds besides its keys

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.keys)


TOP_LEVEL = Table(
    "top level",
    (
        Key("id", "string", REQUIRED, "the exercise's id: the name of its folder under exercises/"),
        Key("title", "string", "the id", "the exercise's name in listings and reports"),
        Key("topic", "string", '""', "what it practises, one line"),
        Key("trials", "integer", "2", "trials per case, each with inputs drawn afresh (a case's `trials` overrides)"),
        Key(
            "default_lang",
            "string",
            "none: ask for --lang",
            "the version `kcourse grade <id>` picks without --lang, where there are several",
        ),
        Key(
            "reference_device",
            "string",
            '"cpu"',
            '"cuda": float64 references and transforms of the heavy cases on the GPU where there is one',
        ),
        Key("variants", "table of tables", REQUIRED, "the exercise's versions: `[variants.<name>]`"),
        Key("inputs", "table of tables", "{}", "the tensors made for each case: `[inputs.<name>]`"),
        Key(
            "outputs", "table of tables", REQUIRED, "the tensors the entry point writes or returns: `[outputs.<name>]`"
        ),
        Key("cases", "array of tables", REQUIRED, "the sizes and inputs the numerics are checked at: `[[cases]]`"),
        Key("tolerance", "table of tables", REQUIRED, "`[tolerance.<dtype>]`, and named ones cases or outputs pick"),
        Key("performance", "table", "{}", "the timed sizes, the work model and the speed bar: `[performance]`"),
        Key(
            "tuning",
            "table of tables",
            "{}",
            "`[tuning.<lang>]`: keyword (or -D define) -> values `kcourse tune` tries",
        ),
        Key("scoring", "table", "{ numerics = 7, speed = 3 }", "points per check name, for gradebooks and exports"),
        Key("checks", "table", "none", "the checks of a registered operator: `[checks]`"),
        Key("mistakes", "array of tables", "[]", "the exercise's own hints, tried first: `[[mistakes]]`"),
    ),
    "the keys outside any table",
)

VARIANT = Table(
    "[variants.<name>]",
    (
        Key("kind", "string", "the version's name", "what the learner writes: triton, cuda, cuda_host or torch_op"),
        Key(
            "stub", "string", REQUIRED, "the learner's file in `exercises/<id>/` (the solution's, in `solutions/<id>/`)"
        ),
        Key("entry", "string", REQUIRED, "the entry point's name"),
        Key(
            "args",
            "array of strings",
            REQUIRED,
            'its arguments: tensors, case parameters ("n:int64" for C), strides ("x.stride(0)")',
        ),
        Key("timeout_s", "float", "60", "seconds a grade of this version may take"),
        Key("host_memory", "string", '"pageable"', '"pinned": page-locked host arrays (kind cuda_host only)'),
        Key("dtypes", "array of strings", "every case's", "the case dtypes this version takes"),
        Key("link", "array of strings", "[]", 'CUDA Toolkit libraries it links, as -l takes them (["cublas"])'),
        Key("requires", "array of strings", "[]", 'header libraries the learner installs (["thunderkittens"])'),
        Key("build", "string", '"jit"', 'torch_op only: "jit", "setup" (setup.py) or "cmake" (CMakeLists.txt)'),
        Key("files", "array of strings", "[]", "torch_op only: the exercise's files the build needs beside the stub"),
        Key("reference", "string", '"reference"', "the function of reference.py it is checked and timed against"),
        Key("returns", "boolean", "false", "a Python entry point that returns its outputs instead of filling them"),
        Key(
            "sanitizer_skip",
            "table",
            "{}",
            "compute-sanitizer tools not run on it, each with the reason the learner reads",
        ),
        Key("flops", "string", "[performance]'s", "this version's own FLOP count, an expression of the case"),
        Key("bytes", "string", "[performance]'s", "this version's own byte count, an expression of the case"),
        Key(
            "summary",
            "string",
            '""',
            "what the version teaches, one line: docs/exercises.md's `what` (the title where none)",
        ),
        Key(
            "measured",
            "string",
            '""',
            "what its solution measured on a GPU, with its PyTorch anchor: docs/exercises.md's last column (—: none)",
        ),
    ),
    "one version of the exercise (usually named for its language: cuda, triton), what --lang picks",
)

TENSOR = Table(
    "[inputs.<name>] / [outputs.<name>]",
    (
        Key("shape", "array", REQUIRED, 'dimensions: integers or expressions of the case ("M", "N // 2")'),
        Key("dtype", "string", "the case's dtype", "float64, float32, float16, bfloat16, int32, int64 or uint8"),
        Key("init", "string", '"normal"', "normal: N(0,1); uniform: U[0,1); positive: U[0.5,1.5)"),
        Key("transform", "string", "none", "inputs only: a function of reference.py the drawn values pass through"),
        Key("check", "string", "none", "outputs only: a function of reference.py that judges it by its properties"),
        Key("tolerance", "string", "the case's", "outputs only: the `[tolerance.<name>]` table that judges it"),
    ),
    "a tensor of the entry point; an output named like an input is that input updated in place",
)

CASE = Table(
    "[[cases]] / [[performance.cases]]",
    (
        Key("gpu_only", "boolean", "false", "checked only on a GPU (too large for the CPU)"),
        Key("inputs", "table", "{}", "per input, its values and layout in this case (the next table)"),
        Key("outputs", "table", "{}", "per output, its layout in this case (the next table)"),
        Key("trials", "integer", "the spec's", "trials of this case (1 for one too large to repeat)"),
        Key("sanitize", "boolean", "false", "the case compute-sanitizer runs on (default: a small one is picked)"),
        Key("op_checks", "boolean", "false", "the cases whose first trial runs `[checks]`"),
        Key("tolerance", "string", "the dtype's", "the `[tolerance.<name>]` table that judges its outputs"),
    ),
    'a case; every other key is one of its parameters (`n = 5`, `dtype = "float16"`; dtype defaults to float32)',
)

CASE_TENSOR = Table(
    "[[cases]] inputs.<name> / outputs.<name>",
    (
        Key("layout", "string", '"contiguous"', "row_slice, transposed or interleaved: strided memory"),
        Key("init", "string", "the tensor's", "inputs: normal, uniform or positive for this case"),
        Key("scale", "float", "1.0", "inputs: the drawn values multiplied by it"),
        Key("offset", "float", "0", "inputs: added to the drawn values (large magnitudes)"),
        Key("special", "string", "none", "inputs: neg_inf_entries, neg_inf_rows or large"),
        Key("transform", "string", "the tensor's", "inputs: this case's own function of reference.py"),
    ),
    'a tensor\'s options in one case: `inputs = { x = { scale = 10.0, layout = "row_slice" } }`',
)

TOLERANCE = Table(
    "[tolerance.<name>]",
    (
        Key("atol", "float", REQUIRED, "absolute tolerance: |got - expected| <= atol + rtol · |expected|"),
        Key("rtol", "float", REQUIRED, "relative tolerance"),
        Key("accumulate", "string", "none", "values summed into one output (an expression): rtol grows as 2·√n·u"),
    ),
    "named for a dtype (float32), which judges that dtype's cases, or any name a case or output picks",
)

PERFORMANCE = Table(
    "[performance]",
    (
        Key("cases", "array of tables", "[]", "the timed sizes: `[[performance.cases]]`, keyed like `[[cases]]`"),
        Key("threshold", "float", "0.5", "the learner's speed / the solution's needed to pass speed"),
        Key("bytes", "string", "none", "bytes moved, an expression of the case (elem: the element size)"),
        Key("flops", "string", "none", "floating-point operations, an expression of the case"),
        Key("bound", "string", '""', "memory (GB/s against copy bandwidth) or compute (TFLOP/s against matmul)"),
        Key("max_extra_bytes", "string", "none", "peak GPU memory allowed beyond inputs and outputs, an expression"),
        Key("memory_hint", "string", '""', "what that limit means, for the failure message"),
        Key("baseline_args", "table", "{}", "parameters that make the learner's own entry point a timed baseline"),
    ),
    "how the exercise is timed",
)

MISTAKE_MATCHERS = ("check", "code", "first_case", "nan", "message", "lang")  # how the failure shows, all must hold
MISTAKE = Table(
    "[[mistakes]]",
    (
        Key("name", "string", REQUIRED, "the mistake, in lower case letters, digits and _"),
        Key("hint", "string", "none", "what the learner reads under the failing check (none: a generic hint says it)"),
        Key(
            "fixture",
            "string",
            "none",
            "its file in tests/fixtures/submissions/, graded by the tests: a learner's file, or NAME.edit.toml, "
            "the solution (or the fixture its base = names) with the [[edit]]s it lists ({old, new, count})",
        ),
        Key("tiers", "array of strings", '["cpu"]', 'where the tests grade the fixture: "cpu" and/or "gpu"'),
        Key("gpu_code", "string or array", "[]", "the code(s) a GPU's grade gets, where not `code`'s"),
        Key("check", "string", "any", "matcher: the failing check's name (numerics, build, speed, ...)"),
        Key("code", "string or array", "any", "matcher: the failing check's code(s) (mismatch, partial_write, ...)"),
        Key("first_case", "string or array", "any", 'matcher: whole words of the failing case\'s label ("M=1 N=1")'),
        Key("nan", "boolean", "any", "matcher: true: NaN or inf in the output where the reference is finite"),
        Key("message", "string", "any", "matcher: a regular expression searched for in the check's message"),
        Key("lang", "string", "every version", "matcher: a version's name or a language"),
    ),
    "a classic mistake: how its first failing check shows, and the hint it gets",
)

CHECKS = Table(
    "[checks]",
    (
        Key(
            "custom_op",
            "string",
            "required without autograd_function",
            'the operator\'s schema as torch prints it ("ns::name(Tensor x) -> Tensor")',
        ),
        Key("autograd", "boolean", "false", "its backward is registered too: gradients are checked"),
        Key("autograd_function", "boolean", "false", "instead of custom_op: a plain torch.autograd.Function"),
        Key("gradcheck", "boolean", "false", "torch.autograd.gradcheck in float64 on the tiny marked cases"),
        Key("kernel_backward", "boolean", "false", "the backward must compute with the learner's kernels"),
    ),
    "the checks of an operator registered with torch.library (grader/core/op_spec.py parses it)",
)

TABLES = (TOP_LEVEL, VARIANT, TENSOR, CASE, CASE_TENSOR, TOLERANCE, PERFORMANCE, MISTAKE, CHECKS)
# Tables whose keys are the spec's own choice: each entry's meaning, for the reference.
FREE_TABLES = {
    "[tuning.<lang>]": "keyword arguments of a Triton entry point, or -D defines of a CUDA file -> the values to try",
    "[scoring]": "a check's name (numerics, speed, memory, operator, ...) -> its points",
}

TOP_KEYS = TOP_LEVEL.names
VARIANT_KEYS = VARIANT.names
TENSOR_KEYS = TENSOR.names
CASE_KEYS = CASE.names  # the rest of a [[cases]] entry are parameters
CASE_TENSOR_KEYS = CASE_TENSOR.names
TOLERANCE_KEYS = TOLERANCE.names
PERFORMANCE_KEYS = PERFORMANCE.names
MISTAKE_KEYS = MISTAKE.names
CHECKS_KEYS = CHECKS.names


def refuse_unknown(raw: Any, keys: tuple[str, ...], where: str) -> None:
    """A key the table does not take is refused, naming the ones it does (a table that is not one is left to
    the parser, which says what it expected)."""
    unknown = sorted(set(raw) - set(keys)) if isinstance(raw, dict) else []
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(keys)}")


def _tables(raw: Any) -> dict[str, Any]:
    return raw if isinstance(raw, dict) else {}


def check_keys(data: dict[str, Any], where: str) -> None:
    """Every table of a parsed spec.toml but [[mistakes]] (spec._mistakes checks each entry) and [checks]
    (op_spec.parse): no key the parser would ignore."""
    refuse_unknown(data, TOP_KEYS, where)
    for name, raw in _tables(data.get("variants")).items():
        refuse_unknown(raw, VARIANT_KEYS, f"{where}: [variants.{name}]")
    for side in ("inputs", "outputs"):
        for name, raw in _tables(data.get(side)).items():
            refuse_unknown(raw, TENSOR_KEYS, f"{where}: [{side}.{name}]")
    for name, raw in _tables(data.get("tolerance")).items():
        refuse_unknown(raw, TOLERANCE_KEYS, f"{where}: [tolerance.{name}]")
    performance = _tables(data.get("performance"))
    refuse_unknown(performance, PERFORMANCE_KEYS, f"{where}: [performance]")
    for table, cases in (("cases", data.get("cases")), ("performance.cases", performance.get("cases"))):
        for number, case in enumerate(cases if isinstance(cases, list) else [], 1):
            for side in ("inputs", "outputs"):
                for name, raw in _tables(_tables(case).get(side)).items():
                    refuse_unknown(raw, CASE_TENSOR_KEYS, f"{where}: [[{table}]] #{number}: {side}.{name}")

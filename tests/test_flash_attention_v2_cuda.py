"""flash_attention_v2 (forward: out and lse) and flash_attention_v2_backward (dq, dk, dv), CUDA versions:
torch operators beside the Triton versions, on the same cases.

CPU: each spec has a CUDA operator version while `kcourse grade <id>` stays Triton; each README has a
CUDA ladder apart from the Triton one; the stubs and the solutions compile for sm_90 against torch's
headers (nvcc's report lists every kernel) and the grader reports their GPU checks skipped, never passed;
the solutions' kernels, run on the CPU by a warp emulator (tests/fixtures/warp_emulator/: ldmatrix, mma.sync,
cp.async lane by lane), match the reference; the ladder's first kernels (tests/fixtures/submissions/
flash_attention_v2*_minimal.cu), played in torch, pass every case, and each classic mistake, played the
same way, fails one. GPU (`python -m pytest -m gpu -s tests/test_flash_attention_v2_cuda.py`): the
solutions pass, printing their TFLOP/s beside SDPA's (forward and backward) measured in the same process;
the stubs fail with nothing written; the minimal kernels pass numerics. The mistakes edited into the
solutions are graded by tests/test_exercise_mistakes.py (the specs' [[mistakes]] with lang = "cuda")."""

from __future__ import annotations

import functools
import math
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from conftest import HAS_GPU, ROOT, _session_cache, submission

from grader.checks import memory
from grader.checks.checking import compare, load_reference, reference_outputs
from grader.checks.hints import parse_ladder
from grader.checks.inputs import generate, place
from grader.core.discovery import discover_exercises, resolve
from grader.core.records import FAILED, PASSED, SKIPPED
from grader.run.grade import grade
from grader.toolchain.build import compile_check_torch_op

FWD, BWD = "flash_attention_v2", "flash_attention_v2_backward"
EXERCISES = (FWD, BWD)
SPECS = {e: discover_exercises()[e] for e in EXERCISES}
REFERENCES = {e: load_reference(SPECS[e].folder / "reference.py") for e in EXERCISES}
ARGS = {FWD: ["q", "k", "v", "causal"], BWD: ["q", "k", "v", "out", "lse", "dout", "causal"]}
VARIANTS = [(t, d, c) for t in ("__half", "__nv_bfloat16") for d in (64, 128) for c in ("false", "true")]
KERNELS = {
    FWD: {f"void flash_fwd_kernel<{t}, {d}, {c}>(Params)" for t, d, c in VARIANTS},
    BWD: {f"void flash_bwd_{k}_kernel<{t}, {d}, {c}>(Params)" for t, d, c in VARIANTS for k in ("dq", "dkdv")}
    | {f"void flash_bwd_delta_kernel<{t}, {d}>(Params)" for t, d, _ in VARIANTS},
}


def stub(exercise):
    return SPECS[exercise].folder / f"{exercise}.cu"


def solution(exercise):
    return ROOT / "solutions" / exercise / f"{exercise}.cu"


def checks_by_name(result):
    return {c.name: c for c in result.checks}


# --- the specs and the READMEs -------------------------------------------------------------------------


@pytest.mark.parametrize("exercise", EXERCISES)
def test_each_spec_has_a_cuda_operator_version_on_the_triton_versions_cases(exercise):
    spec = SPECS[exercise]
    cuda = spec.variants["cuda"]
    assert (cuda.kind, cuda.stub, cuda.entry) == ("torch_op", f"{exercise}.cu", exercise)
    assert [a.name for a in cuda.args] == ARGS[exercise] and cuda.returns_outputs  # the operator returns the outputs
    assert cuda.timeout_s >= 600  # the first build compiles torch's headers and every kernel
    assert all(cuda.accepts(c) for c in spec.cases + spec.performance.cases)
    assert resolve((exercise,)).variant.kind == "triton"  # default_lang: week 9's grade stays Triton
    assert resolve((exercise,), lang="cuda").variant.kind == "torch_op"


@pytest.mark.parametrize("exercise, triton_steps", [(FWD, 6), (BWD, 4)])
def test_each_readme_has_a_cuda_ladder_from_cuda_cores_to_the_solution_apart_from_the_triton_one(
    exercise, triton_steps
):
    text = (SPECS[exercise].folder / "README.md").read_text()
    cuda, triton = parse_ladder(text, "cuda"), parse_ladder(text, "triton")
    assert len(cuda) == 4 and all(s.roofline_pct for s in cuda), cuda
    assert [s.roofline_pct for s in cuda] == sorted(s.roofline_pct for s in cuda)
    assert len(triton) == triton_steps and not {s.title for s in cuda} & {s.title for s in triton}


# --- compiling without a GPU -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compiled():
    """The two stubs and the two solutions compiled once, two at a time (each parses torch's headers; the
    backward solution's 20 tensor-core kernels take a minute or more), into the session's build cache,
    where the grades below find them."""
    sources = {
        (e, who): (stub(e) if who == "stubs" else solution(e)) for e in EXERCISES for who in ("stubs", "solutions")
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KCOURSE_CACHE", str(_session_cache()))
        with ThreadPoolExecutor(2) as pool:
            results = dict(zip(sources, pool.map(compile_check_torch_op, sources.values())))
    for result in results.values():
        if result.skipped:
            pytest.skip(result.log)
    return results


@pytest.mark.nvcc
@pytest.mark.slow
@pytest.mark.solutions
def test_the_stubs_and_the_solutions_compile_for_sm_90_with_every_kernel(compiled):
    for (exercise, who), result in compiled.items():
        assert result.ok, f"{exercise} ({who}): {result.log}"
        assert {k["kernel"] for k in result.resources} == KERNELS[exercise], (exercise, who)
        assert {k["arch"] for k in result.resources} == {"sm_90"}
    # the forward spills what flash_attention_v1's solution spills (256 bytes, outside the MMA loops); the
    # backward's 256-thread blocks a few words at most
    for exercise, spilled in ((FWD, 512), (BWD, 64)):
        for kernel in compiled[(exercise, "solutions")].resources:
            assert kernel["registers"] <= 255, kernel
            assert kernel["spill_stores"] + kernel["spill_loads"] <= spilled, kernel


@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU path")
@pytest.mark.nvcc
@pytest.mark.slow
@pytest.mark.solutions
@pytest.mark.parametrize("exercise", EXERCISES)
@pytest.mark.parametrize("source", ["solutions", "stubs"])
def test_without_a_gpu_the_cuda_versions_are_compiled_and_their_gpu_checks_reported_skipped(compiled, exercise, source):
    result = grade(resolve((exercise,), lang="cuda"), source=source, seed=7)
    checks = checks_by_name(result)
    assert checks["build"].status == PASSED and "<__nv_bfloat16, 128" in checks["build"].message
    assert checks["numerics"].status == SKIPPED and "no GPU" in checks["numerics"].message
    assert checks["speed"].status == SKIPPED
    assert result.status == SKIPPED  # never passed


# --- the solutions' kernels on the CPU, under the warp emulator ------------------------------------------

# Drivers: read the tensors, fill the solution's Params as its operator does, launch as its operator does.
# Only the kernels of the EMULATED cases are instantiated (each instantiation costs seconds of g++).
DISPATCH = r"""
template <typename T, int D, bool C> struct Run { static void go(); };
static void dispatch(int dtype, int d, int causal) {
    if (dtype == 0 && d == 64 && causal) return Run<__half, 64, true>::go();
    if (dtype == 0 && d == 64 && !causal) return Run<__half, 64, false>::go();
    if (dtype == 0 && d == 128 && !causal) return Run<__half, 128, false>::go();
    if (dtype == 1 && d == 128 && causal) return Run<__nv_bfloat16, 128, true>::go();
    std::exit(6);
}
static Operand operand(emu_io::Tensor& t) { return {t.data(), t.stride[0], t.stride[1], t.stride[2], t.stride[3]}; }
static bool aligned(emu_io::Tensor& t) { return t.stride[3] == 1 && t.stride[2] % 8 == 0 && t.stride[1] % 8 == 0 && t.stride[0] % 8 == 0; }
static Params P;
static int BH;
"""
DRIVERS = {
    FWD: DISPATCH
    + r"""
template <typename T, int D, bool C> void Run<T, D, C>::go() {
    emu::launch({unsigned((P.n_ctx + kBlockM - 1) / kBlockM), unsigned(BH), 1}, kThreads, smem_bytes<D>(),
                [] { flash_fwd_kernel<T, D, C>(P); });
}
int main(int, char** argv) {
    ++argv;
    const int dtype = atoi(*argv++), B = atoi(*argv++), H = atoi(*argv++), N = atoi(*argv++), d = atoi(*argv++),
              causal = atoi(*argv++);
    emu_io::Tensor q = emu_io::load(argv, 4), k = emu_io::load(argv, 4), v = emu_io::load(argv, 4);
    std::vector<uint16_t> out(size_t(B) * H * N * d, 0x7E5A);
    std::vector<float> lse(size_t(B) * H * N, NAN);
    const double scale = 1.0 / std::sqrt(double(d));
    P = Params{operand(q), operand(k), operand(v), out.data(), lse.data(), H, N, float(scale),
               float(1.4426950408889634 * scale), aligned(q) && aligned(k) && aligned(v)};
    BH = B * H;
    dispatch(dtype, d, causal);
    emu_io::save(*argv++, out.data(), out.size() * 2);
    emu_io::save(*argv++, lse.data(), lse.size() * 4);
}
""",
    BWD: DISPATCH
    + r"""
template <typename T, int D, bool C> void Run<T, D, C>::go() {
    const unsigned n = unsigned(P.n_ctx), blocks = (n + kBlockOwn - 1) / kBlockOwn;
    emu::launch({(n + kWarps - 1) / kWarps, unsigned(BH), 1}, kThreads, 0, [] { flash_bwd_delta_kernel<T, D>(P); });
    emu::launch({blocks, unsigned(BH), 1}, kThreads, smem_dq<D>(), [] { flash_bwd_dq_kernel<T, D, C>(P); });
    emu::launch({blocks, unsigned(BH), 1}, kThreads, smem_dkdv<D>(), [] { flash_bwd_dkdv_kernel<T, D, C>(P); });
}
int main(int, char** argv) {
    ++argv;
    const int dtype = atoi(*argv++), B = atoi(*argv++), H = atoi(*argv++), N = atoi(*argv++), d = atoi(*argv++),
              causal = atoi(*argv++);
    emu_io::Tensor q = emu_io::load(argv, 4), k = emu_io::load(argv, 4), v = emu_io::load(argv, 4),
                   out = emu_io::load(argv, 4), lse = emu_io::load(argv, 3), dout = emu_io::load(argv, 4);
    const size_t numel = size_t(B) * H * N * d;
    std::vector<uint16_t> dq(numel, 0x7E5A), dk(numel, 0x7E5A), dv(numel, 0x7E5A);
    std::vector<float> delta(size_t(B) * H * N, NAN);
    const double scale = 1.0 / std::sqrt(double(d));
    P = Params{operand(q), operand(k), operand(v), operand(out), operand(dout),
               RowStats{static_cast<const float*>(lse.data()), lse.stride[0], lse.stride[1], lse.stride[2]},
               delta.data(), dq.data(), dk.data(), dv.data(), H, N, float(scale), float(1.4426950408889634 * scale),
               aligned(q) && aligned(k) && aligned(v) && aligned(dout)};
    BH = B * H;
    dispatch(dtype, d, causal);
    emu_io::save(*argv++, dq.data(), numel * 2);
    emu_io::save(*argv++, dk.data(), numel * 2);
    emu_io::save(*argv++, dv.data(), numel * 2);
}
""",
}
# causal and not, d = 64 and 128, both dtypes, row slices (the scalar load path), one key block and many, ragged
EMULATED = {
    FWD: [
        "N=150 d=64 dtype=float16 causal=True (k layout=row_slice",
        "N=100 d=128 dtype=float16 causal=False",
        "N=17 d=128 dtype=bfloat16 causal=True",
        "N=1000 d=64 dtype=float16 causal=True",
    ],
    BWD: [
        "N=130 d=64 dtype=float16 causal=True (k layout=row_slice",
        "N=100 d=128 dtype=float16 causal=False",
        "N=17 d=128 dtype=bfloat16 causal=True",
        "N=600 d=64 dtype=float16 causal=True",
    ],
}


def emulator():
    folder = ROOT / "tests" / "fixtures" / "warp_emulator"
    if not folder.is_dir():
        pytest.skip("tests/fixtures/warp_emulator/ is absent (a learner's kit): it runs the solutions' kernels")
    sys.path.insert(0, str(folder))
    import warp_emulator

    return warp_emulator


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    """The two solutions' emulated programs, compiled side by side. The emulator ships with the instructors'
    fixtures (it mirrors solution code), so a learner's kit skips this."""
    warp_emulator = emulator()
    reason = warp_emulator.unavailable()
    if reason:
        pytest.skip(reason)
    folder = tmp_path_factory.mktemp("emulated")
    with ThreadPoolExecutor(2) as pool:
        return dict(zip(EXERCISES, pool.map(lambda e: warp_emulator.build(solution(e), DRIVERS[e], folder), EXERCISES)))


def case_named(exercise, fragment):
    return next(c for c in SPECS[exercise].cases if fragment in c.label())


@pytest.mark.slow
@pytest.mark.solutions
@pytest.mark.parametrize("exercise", EXERCISES)
def test_the_solutions_tensor_core_kernels_run_by_the_warp_emulator_match_the_reference(emulated, exercise):
    assert_emulated_cases_pass(emulated[exercise], exercise, EMULATED[exercise])


# the experiment's own: the scalar copies, one block and many (causal: the diagonal's blocks, and the blocks above it
# skipped), and scores of std 30, whose max grows past 2^8 mid-row
EXPERIMENT_CASES = EMULATED[FWD] + ["N=333 d=64 dtype=float16 causal=False (q scale=30.0)"]


@pytest.mark.slow
@pytest.mark.solutions
@pytest.mark.parametrize(
    "defines",
    [
        {},
        {"KC_RESCALE_ABOVE": 0},
        {"KC_SPLIT": 2},
        {"KC_WARP_ROWS": 16, "KC_BLOCK_N_D128": 32, "KC_Q_IN_REGISTERS": 1},
        {"KC_WARPS": 8},
    ],
    ids=["as-is", "rescale-always", "split-2", "16-rows-q-held", "8-warps"],
)
def test_the_cuda_forward_experiment_run_by_the_warp_emulator_matches_the_reference(tmp_path, defines):
    """scripts/fa2_forward_cuda.cu (issue 42's next CUDA forward: K and V double-buffered, one barrier a block, the
    rescale only when a row's max grows past 2^8): as it is, with the solution's rescale, in two softmax steps, with
    one MMA tile of rows a warp and Q held in registers, and with 8 warps (the tile copies' other pass counts)."""
    warp_emulator = emulator()
    reason = warp_emulator.unavailable()
    if reason:
        pytest.skip(reason)
    text = (ROOT / "scripts/fa2_forward_cuda.cu").read_text()
    source = tmp_path / "fa2_forward_cuda.cu"
    kernel = text.index("\n", text.index("// ---- the kernel")) + 1  # the device code the emulator takes starts there
    lines = "".join(f"#define {name} {value}\n" for name, value in defines.items())
    source.write_text(f"{text[:kernel]}{lines}{text[kernel:]}")
    assert_emulated_cases_pass(warp_emulator.build(source, DRIVERS[FWD], tmp_path), FWD, EXPERIMENT_CASES)


# Runs fa2_forward_cuda.forward on the CPU emulator's build: argv library, inputs (torch.save), outputs' path, causal
CPU_CHILD = """
import ctypes, sys, torch
sys.path.insert(0, sys.argv[4])
import fa2_forward_cuda
lib = ctypes.CDLL(sys.argv[1])
lib.kcourse_cuda_cpu_register.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
q, k, v = (torch.load(sys.argv[2])[name] for name in ("q", "k", "v"))
out, lse = torch.full(q.shape, float("nan"), dtype=q.dtype), torch.full(q.shape[:-1], float("nan"))
for t in (q, k, v, out, lse):  # the whole storage: a row slice's rows lie inside a wider one
    lib.kcourse_cuda_cpu_register(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
fa2_forward_cuda.forward(lib, q, k, v, out, lse, sys.argv[3] == "1")
torch.save({"out": out, "lse": lse}, sys.argv[5])
"""
CPU_EMULATED = EMULATED[FWD] + [
    "N=333 d=64 dtype=float16 causal=False (q scale=30.0)",
    "N=300 d=128 dtype=float16 causal=True (k offset=100.0)",
]


@pytest.mark.slow
@pytest.mark.solutions
@pytest.mark.parametrize("kernel", ["solution", "experiment"])
def test_the_cuda_forward_kernels_run_by_the_cpu_emulator_match_the_reference(tmp_path, kernel):
    """The solution's kernel, with its own PTX (ldmatrix, mma.sync, cp.async), and scripts/fa2_forward_cuda.cu's, each
    built whole around the experiment's launcher and run by the grader's CPU emulator (threads in a seeded random
    order, AddressSanitizer on): the spec's cases, strided and sharp ones among them, match the reference."""
    from grader import cuda_cpu

    scripts = ROOT / "scripts"
    if not (scripts / "fa2_forward_cuda.py").is_file() or cuda_cpu.host_compiler() is None:
        pytest.skip("needs scripts/fa2_forward_cuda.py (not in a learner's kit) and a host C++ compiler")
    sys.path.insert(0, str(scripts))
    import fa2_forward_cuda

    source = fa2_forward_cuda.write_source(getattr(fa2_forward_cuda, kernel.upper()), tmp_path)
    built = cuda_cpu.build(source)
    assert built.ok, built.log
    spec = SPECS[FWD]
    for fragment in CPU_EMULATED:
        case = case_named(FWD, fragment)
        values = generate(spec, case, seed=11)
        inputs = {n: place(x, case.inputs.get(n, {}).get("layout"), "cpu") for n, x in values.items()}
        torch.save(inputs, tmp_path / "in.pt")
        argv = [
            built.library,
            str(tmp_path / "in.pt"),
            str(int(case.params["causal"])),
            str(scripts),
            str(tmp_path / "out.pt"),
        ]
        done = subprocess.run(
            [sys.executable, "-c", CPU_CHILD, *argv],
            env={**os.environ, **cuda_cpu.child_env()},
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        got = torch.load(tmp_path / "out.pt")
        for name, ref in zip(("out", "lse"), reference_outputs(REFERENCES[FWD], spec, values, case.params)):
            found = compare(name, got[name], ref, spec.tolerance_of(case), case.label())
            assert found.ok, found.message


def assert_emulated_cases_pass(exe, exercise, fragments):
    """The emulated kernels' outputs on the spec's cases named by `fragments` (trial 0, seed 11) pass its comparison."""
    spec = SPECS[exercise]
    for fragment in fragments:
        case = case_named(exercise, fragment)
        values = generate(spec, case, seed=11)
        inputs = {n: place(x, case.inputs.get(n, {}).get("layout"), "cpu") for n, x in values.items()}
        p = case.params
        shape = (p["B"], p["H"], p["N"], p["d"])
        outputs = {
            o.name: (tuple(shape[: len(o.shape)]), torch.float32 if o.dtype == "float32" else inputs["q"].dtype)
            for o in spec.outputs
        }
        warp_emulator = emulator()
        got = warp_emulator.run(
            exe, [warp_emulator.DTYPE_CODE[inputs["q"].dtype], *shape, int(p["causal"])], inputs, outputs
        )
        for (name, out), ref in zip(got.items(), reference_outputs(REFERENCES[exercise], spec, values, p)):
            found = compare(name, out, ref, spec.tolerance_of(case), case.label())
            assert found.ok, found.message


# --- the ladder's first kernels and their classic mistakes, played in torch -------------------------------

LOG2E, LN2 = 1 / math.log(2), math.log(2)


def causal_mask(n: int) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool).triu(1)  # key j > query i


def forward_played(q, k, v, causal: bool, mistake: str | None = None):
    """The minimal forward's arithmetic in float32 (scores in log2 units, the online softmax's result taken
    at once), with one of its classic mistakes if asked: (out, lse)."""
    q, k, v = (x.float() for x in (q, k, v))
    s = (q * (LOG2E / math.sqrt(q.shape[-1]))) @ k.transpose(-1, -2)
    if causal:
        s = s.masked_fill(causal_mask(s.shape[-1]), -math.inf)
    m = s.amax(-1)
    weights = torch.exp2(s - m[..., None])
    l = weights.sum(-1)
    lse = {"lse_in_log2": m + torch.log2(l), "lse_without_max": torch.log2(l) * LN2}.get(
        mistake, (m + torch.log2(l)) * LN2
    )
    return weights @ v / l[..., None], lse


def backward_played(q, k, v, out, lse, dout, causal: bool, mistake: str | None = None):
    """The minimal backward's arithmetic in float32, with one of its classic mistakes if asked: (dq, dk, dv)."""
    q, k, v, out, dout = (x.float() for x in (q, k, v, out, dout))
    scale = 1 / math.sqrt(q.shape[-1])
    s = (q * scale * LOG2E) @ k.transpose(-1, -2)
    p = torch.exp2(s - (lse if mistake == "lse_not_in_log2" else lse * LOG2E)[..., None])
    if causal and mistake != "causal_forward_only":
        p = p.masked_fill(causal_mask(s.shape[-1]), 0.0)
    delta = torch.zeros_like(lse) if mistake == "no_delta" else (dout * out).sum(-1)
    ds = p * (dout @ v.transpose(-1, -2) - delta[..., None])
    factor = 1.0 if mistake == "ds_unscaled" else scale
    return ds @ k * factor, ds.transpose(-1, -2) @ q * factor, p.transpose(-1, -2) @ dout


PLAYERS = {FWD: forward_played, BWD: backward_played}


def played_cases(exercise):
    """Every kind of case: the CPU ones and the shorter GPU-only ones (bfloat16, the sharp d = 128 one)."""
    return [i for i, c in enumerate(SPECS[exercise].cases) if not c.gpu_only or c.params["N"] <= 333]


@functools.lru_cache(maxsize=None)
def case_data(exercise: str, index: int):
    """Case `index`'s inputs (trial 0) laid out as the grader lays them out, and the float64 reference."""
    spec = SPECS[exercise]
    case = spec.cases[index]
    values = generate(spec, case, seed=11)
    inputs = {n: place(x, case.inputs.get(n, {}).get("layout"), "cpu") for n, x in values.items()}
    return case, inputs, reference_outputs(REFERENCES[exercise], spec, values, case.params)


def verdicts(exercise: str, mistake: str | None) -> dict[str, str]:
    """Case label -> the grader's comparison code for each output, over the played cases."""
    spec, found = SPECS[exercise], {}
    for index in played_cases(exercise):
        case, inputs, refs = case_data(exercise, index)
        outs = PLAYERS[exercise](*inputs.values(), case.params["causal"], mistake)
        codes = set()
        for spec_out, out, ref in zip(spec.outputs, outs, refs):
            stored = out if spec_out.dtype == "float32" else out.to(inputs["q"].dtype)  # as the kernel stores it
            codes.add(compare(spec_out.name, stored, ref, spec.tolerance_of(case), case.label()).code)
        found[case.label()] = "ok" if codes == {"ok"} else "/".join(sorted(codes - {"ok"}))
    return found


@pytest.mark.parametrize("exercise", EXERCISES)
def test_the_played_minimal_kernel_passes_every_case(exercise):
    found = verdicts(exercise, None)
    assert set(found.values()) == {"ok"} and len(found) >= 10, found


@pytest.mark.parametrize(
    "exercise, mistake, fails_on",
    [
        (FWD, "lse_in_log2", "N=1 d=64"),  # every lse off by a factor log2(e), even one key's
        (FWD, "lse_without_max", "N=1 d=64"),  # log(l) alone is 0 for one key; the answer is its score
        (BWD, "no_delta", "N=17"),  # dS = P dP: dq, dk off everywhere
        (BWD, "causal_forward_only", "causal=True"),  # P rebuilt over the masked keys too
        (BWD, "ds_unscaled", "N=17"),  # dq, dk sqrt(d) times too large
        (BWD, "lse_not_in_log2", "N=100"),  # P = 2^(s log2 e - lse): each row scaled by 2^(0.44 lse)
    ],
)
def test_each_classic_mistake_fails_a_case_of_the_spec(exercise, mistake, fails_on):
    found = verdicts(exercise, mistake)
    failed = [label for label, code in found.items() if code != "ok"]
    assert any(fails_on in label for label in failed), (mistake, found)


# --- GPU: the real operators -------------------------------------------------------------------------------


def rate_line(exercise: str, t) -> str:
    extra = memory.size_text(t.learner_extra_bytes) if t.learner_extra_bytes is not None else "?"
    return (
        f"{exercise} {t.case}: you {t.learner_ms:.4g} ms {t.learner_rate:.4g} TFLOP/s, SDPA{' backward' if exercise == BWD else ''} "
        f"{t.torch_ms:.4g} ms {t.torch_rate:.4g} TFLOP/s (you / SDPA {t.torch_ms / t.learner_ms:.2f}); extra memory "
        f"{extra} (limit {memory.size_text(t.extra_bytes_limit)})"
    )


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.parametrize("exercise", EXERCISES)
def test_cuda_solution_passes_with_its_tflops_beside_sdpa_and_o_n_memory(exercise):
    result = grade(resolve((exercise,), lang="cuda"), source="solutions", seed=3)
    checks = checks_by_name(result)
    assert result.status == PASSED, result.verdict
    assert checks["memory"].status == PASSED, checks["memory"].message
    for t in result.timings:
        if t.learner_ms is not None:  # the sizes before the verdict's are run for their memory alone
            print("\n" + rate_line(exercise, t))
        b, h, n = (int(x.split("=")[1]) for x in t.case.split()[:3])
        scratch = 4 * b * h * n if exercise == BWD else 0  # the backward's float32 delta; the forward allocates nothing
        assert t.learner_extra_bytes < scratch + 2**20


@pytest.mark.gpu
@pytest.mark.solutions
@pytest.mark.parametrize("exercise", EXERCISES)
def test_cuda_stub_fails_on_the_gpu_with_nothing_written(exercise):
    result = grade(resolve((exercise,), lang="cuda"), source="stubs", seed=5, quick=True)
    numerics = checks_by_name(result)["numerics"]
    assert result.status == FAILED and numerics.status == FAILED
    assert numerics.details["code"] == "not_written", numerics.message


@pytest.mark.gpu
@pytest.mark.parametrize("exercise", EXERCISES)
def test_the_ladders_first_kernel_passes_numerics_on_the_gpu(exercise):
    result = grade(
        resolve((exercise,), lang="cuda"), submission=submission(f"{exercise}_minimal.cu"), seed=5, quick=True
    )
    numerics = checks_by_name(result)["numerics"]
    assert numerics.status == PASSED, numerics.message

"""`kcourse capstone` and `kcourse block` (grader/capstone/): a small GPT and one transformer block assembled
from the learner's kernels, checked against PyTorch.

CPU: the tiny capstone with the kit's solutions trains end to end in well under a minute and lands on eager's
loss; a kernel writing NaN fails with its operation named; a crashing kernel fails with the crash, the PyTorch
runs kept; the block says which parts are whose and fails a kernel slightly wrong everywhere; the reports
render; `kcourse progress` counts a passed capstone of the learner's own. GPU: the full run with the solutions."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import submission

from grader.capstone import data, kernels, report, run
from grader.core import store
from grader.core.discovery import discover_exercises, solution_file


def _activations():
    spec = discover_exercises()["activations"]
    return spec, spec.variants["gelu_tanh"]


from grader.core.plans import Requirement
from grader.reports.progress import record_matches


@pytest.fixture(scope="module")
def tiny_solutions(tmp_path_factory):
    """One tiny CPU capstone with the kit's solutions, in a state folder of its own (shared by the tests below)."""
    home = tmp_path_factory.mktemp("capstone") / "home"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KCOURSE_HOME", str(home))
        patch.setenv("KCOURSE_DEVICE", "cpu")
        started = time.monotonic()
        record = run.capstone("solutions", tiny=True, seed=7)
        seconds = time.monotonic() - started
        path = report.render(record, home / "reports")
    return record, seconds, path


@pytest.mark.slow
@pytest.mark.solutions
def test_tiny_capstone_with_the_solutions_lands_on_eagers_loss_in_under_a_minute(tiny_solutions):
    record, seconds, _ = tiny_solutions
    checks = {c["name"]: c for c in record["checks"]}
    print(report.format_capstone(record))
    assert record["status"] == "passed", record["verdict"]
    assert checks["loss"]["status"] == "passed" and checks["loss"]["details"]["gap"] <= 0.02
    assert set(record["runs"]) == {"eager", "kernels"}  # no torch.compile on the CPU: said so
    losses = record["runs"]["kernels"]["losses"]
    assert len(losses) == record["config"]["steps"] and losses[-1] < losses[0]  # it learns
    assert seconds < 60


@pytest.mark.slow
@pytest.mark.solutions
def test_on_the_cpu_the_cheap_triton_kernels_are_yours_and_the_rest_say_why_not(tiny_solutions):
    choices = {(c["operation"], c["role"]): c for c in tiny_solutions[0]["choices"]}
    assert choices[("gelu", "forward")]["exercise"] == "activations"
    assert "Triton interpreter" in choices[("layer_norm", "forward")]["reason"]
    assert "runs only on an NVIDIA GPU" in choices[("adamw", "step")]["reason"]
    assert "graded in float16, bfloat16" in choices[("linear", "forward")]["reason"]


@pytest.mark.slow
@pytest.mark.solutions
def test_the_capstone_report_renders_its_tables_and_plot(tiny_solutions):
    _, _, path = tiny_solutions
    text = path.read_text()
    assert "| gelu | yours (activations, gelu_tanh) |" in text
    assert "| PyTorch eager |" in text and "| your kernels |" in text
    assert "![loss curves](capstone_loss.png)" in text and (path.parent / "capstone_loss.png").stat().st_size > 0
    assert "## Verdict: passed" in text


@pytest.mark.slow
@pytest.mark.solutions
def test_the_capstone_run_is_recorded_but_solutions_do_not_count_for_the_plan(tiny_solutions):
    record = tiny_solutions[0]
    assert record_matches(Requirement("capstone"), record) is False  # the kit's solutions, not the learner's
    assert record_matches(Requirement("capstone"), {**record, "source": "learner"}) is True
    assert record_matches(Requirement("capstone"), {**record, "source": "learner", "status": "failed"}) is False


@pytest.mark.slow
def test_a_kernel_writing_nan_fails_the_capstone_with_its_operation_named():
    use = run.parse_use((f"activations={submission('capstone_gelu_nan.py')}",))
    record = run.capstone("learner", tiny=True, seed=3, use=use, steps=4)
    assert record["status"] == "failed"
    assert "gelu forward (activations, gelu_tanh)" in record["verdict"] and "NaN" in record["verdict"]
    assert record["runs"]["eager"]["losses"][-1] is not None  # the baseline still ran and is kept
    assert store.latest("capstone")["status"] == "failed"


@pytest.mark.slow
def test_a_crashing_kernel_fails_the_capstone_and_the_pytorch_run_is_kept():
    use = run.parse_use((f"activations={submission('capstone_gelu_crash.py')}",))
    record = run.capstone("learner", tiny=True, seed=3, use=use, steps=2)
    assert record["status"] == "failed"
    assert "SIGSEGV" in record["verdict"] and "training with your kernels" in record["verdict"]
    assert "eager" in record["runs"]


@pytest.mark.slow
@pytest.mark.solutions  # the instructor's files: absent from a learner's kit
def test_the_block_says_which_parts_are_whose_and_renders():
    use = {"activations:gelu_tanh": solution_file(*_activations())}
    record = run.block("learner", tiny=True, seed=5, use=use)  # nothing graded here: only the --use file is yours
    assert record["status"] == "passed", record["verdict"]
    assert "gelu forward: yours (activations, gelu_tanh)" in record["whose"]["ffn"]
    assert "layer_norm forward: PyTorch" in record["whose"]["attention"]
    assert "residual connections: PyTorch (x + part(x))" in record["whose"]["block"]
    assert not any("gelu" in line for line in record["whose"]["attention"])
    text = report.render(record).read_text()
    assert "| ffn |" in text and "yours: gelu forward" in text


@pytest.mark.slow
def test_a_kernel_slightly_wrong_everywhere_fails_the_block_check():
    use = run.parse_use((f"activations={submission('capstone_gelu_scaled.py')}",))
    record = run.block("learner", tiny=True, seed=5, use=use)
    status = {c["name"]: c["status"] for c in record["checks"]}
    assert status == {"attention": "passed", "ffn": "failed", "block": "failed"}


@pytest.mark.slow
def test_a_capstone_with_none_of_your_kernels_is_not_a_pass():
    record = run.capstone("learner", tiny=True, seed=3, steps=2)
    assert record["status"] == "skipped" and "kcourse grade" in record["verdict"]


def test_learner_files_count_only_when_their_latest_grade_passed():
    choices = kernels.pick_kernels("learner", kernels.operation_dtypes("float32", "float32"), gpu=False)
    gelu = next(c for c in choices if c.operation == "gelu" and c.role == "forward")
    assert not gelu.yours and "not graded yet" in gelu.reason and "kcourse grade activations" in gelu.reason


def test_use_names_an_exercise_and_an_existing_file(tmp_path):
    with pytest.raises(run.CapstoneError, match="EXERCISE"):
        run.parse_use(("no_such_exercise=x.py",))
    assert run.parse_use((f"activations={__file__}",)) == {
        "activations:gelu_tanh": __import__("pathlib").Path(__file__)
    }


@pytest.mark.slow
@pytest.mark.gpu
def test_full_capstone_with_the_solutions_is_as_fast_as_eager_within_two_percent():
    # Session 24: H200 1.19x eager's tokens/s, loss 0.05% from eager's (160 s); H100 1.25x, loss 9.3% from eager's
    # (which lagged a plateau) and 0.04% from torch.compile's, inside the widened bar (190 s)
    record = run.capstone("solutions", seed=1234, on_event=lambda e: None)
    print("\n" + report.format_capstone(record))
    runs = record["runs"]
    for name in ("eager", "compile", "kernels"):
        print(
            f"{name}: {runs[name]['tokens_per_s']:,.0f} tokens/s, final loss "
            f"{run.final_loss(runs[name], record['config']['final_window']):.4f}, peak {runs[name]['peak_bytes'] / 1e6:.0f} MB"
        )
    checks = {c["name"]: c for c in record["checks"]}
    assert checks["loss"]["status"] == "passed", checks["loss"]["message"]
    assert checks["speed"]["status"] == "passed", checks["speed"]["message"]
    servable = [
        c for c in record["choices"] if kernels.OPERATIONS[c["operation"]][c["role"]] and c["operation"] != "softmax"
    ]
    assert all(c["exercise"] for c in servable), (
        "every slot an exercise serves is the kit's (softmax: flash attention's)"
    )


@pytest.mark.gpu
def test_full_block_with_the_solutions_is_within_pytorchs_error():
    record = run.block("solutions", seed=1234)
    print("\n" + report.format_block(record))
    assert record["status"] == "passed", record["verdict"]


# --- the glue of every GPU-only slot, on the CPU: reference math in place of the kernels ----------------------


def _fake(function, source="reference math"):
    """A stand-in kernel (kernels.ExerciseKernel's interface: keywords in, outputs by name)."""
    function.source, function.file = source, "fake.py"
    return function


def _reference_kernels():
    import torch
    import torch.nn.functional as F

    from grader.checks.inputs import _reference_module
    from grader.core.paths import exercises_dir

    ce = _reference_module(exercises_dir() / "cross_entropy" / "reference.py")
    adamw = _reference_module(exercises_dir() / "adamw" / "reference.py")

    def embedding_backward(ids, dout, V):  # V as the real kernel's spec needs it: no input of the backward carries it
        return {
            "dweight": torch.zeros(V, dout.shape[-1]).index_add_(0, ids.flatten(), dout.reshape(-1, dout.shape[-1]))
        }

    def cross_entropy(logits, targets):
        losses, dlogits = ce.cross_entropy_and_gradient(logits.float(), targets)
        return {"losses": losses.float(), "dlogits": dlogits.to(logits.dtype)}

    def adamw_step(p, g, m, v, **hyper):
        new = adamw.adamw_step(p.double(), g.double(), m.double(), v.double(), **hyper)
        for tensor, value in zip((p, m, v), new):
            tensor.copy_(value)
        return {"p": p, "m": m, "v": v}

    def attention(q, k, v, out, causal):  # out: given by the caller (interleaved), written in place
        scores = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
        scores = scores.masked_fill(torch.ones(q.shape[-2], q.shape[-2], dtype=torch.bool).triu(1), float("-inf"))
        out.copy_(F.scaled_dot_product_attention(q, k, v, is_causal=True))
        return {"out": out, "lse": torch.logsumexp(scores, -1)}

    def attention_backward(q, k, v, out, lse, dout, dq, dk, dv, causal):
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        with torch.enable_grad():
            found = F.scaled_dot_product_attention(*leaves, is_causal=True)
        for given, grad in zip((dq, dk, dv), torch.autograd.grad(found, leaves, dout)):
            given.copy_(grad)
        return {"dq": dq, "dk": dk, "dv": dv}

    matmul = _fake(lambda A, B: {"C": A @ B})
    return {
        ("embedding", "forward"): _fake(lambda ids, weight: {"out": weight[ids]}),
        ("embedding", "backward"): _fake(embedding_backward),
        ("linear", "forward"): matmul,
        ("linear", "backward"): matmul,
        ("cross_entropy", "forward"): _fake(cross_entropy),
        ("adamw", "step"): _fake(adamw_step),
        ("attention", "forward"): _fake(attention, "flash_attention_v2, triton"),
        ("attention", "backward"): _fake(attention_backward),
    }


def test_the_glue_of_the_gpu_only_slots_trains_exactly_like_pytorch():
    """Embedding forward and backward, the matmul on transposed views for dX and dW, the fused cross-entropy
    gradient, the flash attention forward/backward plumbing (lse saved) and the one-launch AdamW over flat
    buffers: with PyTorch's math behind each slot, the losses are PyTorch's to float32 rounding."""
    import torch

    from grader.capstone.gpt import GPT, ModelConfig
    from grader.capstone.ops import FlatAdamW, Ops, optimizer

    losses = {}
    for name, ops in (("pytorch", Ops()), ("glue", Ops(kernels=_reference_kernels()))):
        torch.manual_seed(0)
        model = GPT(ModelConfig(2, 2, 64, 32), ops)
        opt = optimizer(model, ops, 3e-3, 0.1)
        assert isinstance(opt, FlatAdamW) == (name == "glue")
        batches = data.Batches(data.load_bytes(None), 4, 32, 0, "cpu")
        losses[name] = []
        for step in range(8):
            loss = model(*batches.get(step))
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses[name].append(loss.item())
    assert losses["glue"] == pytest.approx(losses["pytorch"], rel=1e-5)
    assert losses["pytorch"][-1] < losses["pytorch"][0]


def test_the_loss_bar_widens_to_pytorchs_own_run_to_run_gap_between_two_and_ten_percent():
    from grader.capstone.run import loss_tolerance

    shared = {"loss_tolerance": 0.02, "noise_factor": 1.5, "max_tolerance": 0.10}
    ended = lambda final: {"losses": [final] * 20}  # noqa: E731
    # eager 0.2821, torch.compile 0.2997 (6.2% apart, H200, seed 12) -> 9.4%; the kit's kernels 0.2987 (5.9%) pass
    assert loss_tolerance(ended(0.2821), ended(0.2997), 20, shared) == pytest.approx(1.5 * (0.2997 - 0.2821) / 0.2821)
    assert loss_tolerance(ended(1.0), ended(1.001), 20, shared) == 0.02  # PyTorch agrees with itself: the 2% bar
    assert loss_tolerance(ended(1.0), None, 20, shared) == 0.02  # no compile run (the CPU): the 2% bar
    # torch.compile left on a plateau (0.6021 where eager reached 0.2859, H200): 166% would pass anything
    assert loss_tolerance(ended(0.2859), ended(0.6021), 20, shared) == 0.10
    assert run.load_config("capstone", False)[1]["max_tolerance"] == 0.10  # the shipped configuration has the cap


def test_a_loss_spike_in_the_last_steps_does_not_fail_correct_kernels_but_a_moved_plateau_does():
    # H200, seed 1234: eager's loss spiked to 0.56 at step 745 and was still 0.29 at the end; torch.compile's
    # spiked at step 780. A 20-step mean put them 8% apart; the medians of the last 100 steps are 0.5% apart
    window = run.load_config("capstone", False)[0]["final_window"]
    plateau = [0.275 + 0.001 * (i % 3) for i in range(700)]
    spike = [0.275 + 0.28 * 0.88**i for i in range(55)]  # 0.555, 0.423 five steps on, 0.281 thirty on
    eager = {"losses": plateau + spike + [0.275] * 45}
    kernels_yours = {"losses": plateau + [0.275] * 100}
    assert run.final_loss(eager, window) == pytest.approx(run.final_loss(kernels_yours, window), rel=0.02)
    shifted = {"losses": [v * 1.05 for v in kernels_yours["losses"]]}  # a kernel slightly wrong everywhere
    gap = run.final_loss(shifted, window) / run.final_loss(eager, window) - 1
    assert gap > 0.04


@pytest.mark.slow
@pytest.mark.parametrize("tiny", [False, True])
def test_a_run_reads_its_default_text_at_most_twice_so_the_final_loss_compares_learning_not_memorising(tiny):
    # At batch 512 the old 48 KB text was read 550 times; the model memorised it and the runs' final losses,
    # taken where the curve fell fastest, were 25% apart (eager and torch.compile 8%) on the H200.
    cfg, _ = run.load_config("capstone", tiny)
    read = cfg["steps"] * cfg["batch"] * cfg["context"]
    assert read <= 2 * cfg["text_bytes"]
    assert data.load_bytes(None, cfg["text_bytes"]).numel() == cfg["text_bytes"]


def test_gelus_backward_behind_a_learners_forward_is_pytorchs_gradient_without_recomputing_the_forward(monkeypatch):
    import torch
    import torch.nn.functional as F

    from grader.capstone import ops as ops_module

    class Forward:  # the learner's GELU forward, as loaded
        source, file = "activations, gelu_tanh", "gelu.py"

        def __call__(self, x):
            return {"out": F.gelu(x, approximate="tanh")}

    monkeypatch.setattr(ops_module, "recomputed_gradients", lambda *a: pytest.fail("the forward was recomputed"))
    x = torch.randn(64, 32, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(64, 32, dtype=torch.float64)
    ops_module.Ops(kernels={("gelu", "forward"): Forward()}).gelu(x).backward(grad)
    want = x.detach().clone().requires_grad_()
    F.gelu(want, approximate="tanh").backward(grad)
    assert torch.equal(x.grad, want.grad)


@pytest.mark.slow
def test_the_row_statistics_kernel_for_the_layer_norm_backward_matches_float64_on_ragged_rows():
    """grader/capstone/row_stats.py's kernel (it replaced var_mean on the GPU) under the interpreter, in a process
    of its own (the interpreter is chosen at import): rows not a multiple of its row block, columns not a power
    of two, an offset that E[x^2] - E[x]^2 would lose."""
    import os
    import subprocess
    import sys

    code = """
import torch, triton
from grader.capstone.row_stats import _row_stats
x = torch.randn(37, 200, dtype=torch.float64).float() * 3 + 1000
mean, rstd = torch.empty(37), torch.empty(37)
_row_stats[(triton.cdiv(37, 16),)](x, mean, rstd, 37, 200, x.stride(0), 1e-5, ROWS=16, BLOCK=256)
var, expected = torch.var_mean(x.double(), -1, unbiased=False)
assert torch.allclose(mean.double(), expected, rtol=1e-6), (mean.double() - expected).abs().max()
assert torch.allclose(rstd.double(), torch.rsqrt(var + 1e-5), rtol=1e-4)
"""
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(run.__file__).parents[2],
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_an_optimizer_steps_scalars_reach_the_kernel_without_growing_the_layout_cache():
    """AdamW's `step` changes every call: each call passes its own step, and the layout (the outputs' shapes,
    read once per shape) is not recomputed or stored again per step."""
    import torch

    spec = discover_exercises()["adamw"]
    seen = []
    kernel = kernels.ExerciseKernel("adamw", spec, spec.variants["cuda"], lambda tensors, params: seen.append(params))
    p, g, m, v = (torch.zeros(8) for _ in range(4))
    for step in (1, 2, 3):
        kernel(p=p, g=g, m=m, v=v, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, step=step)
    assert [params["step"] for params in seen] == [1, 2, 3]
    assert all(params["n"] == 8 for params in seen)
    assert len(kernel._layouts) == 1


def test_every_steps_batch_is_its_seeded_windows_and_a_step_copies_nothing_from_the_host():
    """Each step's windows start where the (seed, step) generator says, in any order and across a chunk's
    edge; within a chunk the starts are already on the device (a copy a step made the host wait for the GPU)."""
    import torch

    batches = data.Batches(data.load_bytes(None), 4, 32, 7, "cpu")
    tokens = batches.tokens
    for step in (3, 0, data.Batches.CHUNK_STEPS + 2, 5):
        x, y = batches.get(step)
        starts = batches.starts(step)
        assert torch.equal(x, torch.stack([tokens[i : i + 32] for i in starts]))
        assert torch.equal(y, torch.stack([tokens[i + 1 : i + 33] for i in starts]))
    held = batches._starts
    batches.get(6)
    assert batches._starts is held  # the same chunk: nothing drawn or copied again

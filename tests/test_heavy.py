"""References on the GPU (grader/run/heavy.py): asked for by the spec, used only where a GPU is, and the same
inputs and answers as the CPU path."""

import shutil

import pytest
import torch

from grader.checks.inputs import generate
from grader.core.discovery import resolve
from grader.core.spec import SpecError, load_spec
from grader.run import heavy


def _backward():
    return resolve(("flash_attention_v2_backward",))


def test_the_attention_backward_asks_for_its_references_on_the_gpu():
    assert _backward().spec.reference_device == "cuda"


def test_without_a_gpu_the_references_stay_on_the_cpu(monkeypatch):
    monkeypatch.setattr("grader.toolchain.build.gpu_arch", lambda: None)
    assert not heavy.wanted(_backward().spec)


def test_an_unknown_reference_device_is_refused_with_what_to_write(tmp_path):
    folder = tmp_path / "softmax"
    shutil.copytree(resolve(("softmax",)).spec.folder, folder)
    text = (folder / "spec.toml").read_text().replace("trials", 'reference_device = "tpu"\ntrials', 1)
    (folder / "spec.toml").write_text(text)
    with pytest.raises(SpecError, match='use "cpu"'):
        load_spec(folder)


def test_transforms_give_the_same_inputs_whatever_device_computes_them():
    target = _backward()
    case = target.spec.cases[1]
    on_cpu = generate(target.spec, case, seed=3)
    again = generate(target.spec, case, seed=3, device="cpu")
    assert all(torch.equal(on_cpu[name], again[name]) for name in on_cpu)


def test_a_gpu_out_of_memory_computes_the_reference_on_the_cpu_not_an_error(monkeypatch):
    """Twelve grades beside one another (the GPU tier), or a learner's operator holding N x N scores in its cache, can
    fill the GPU: the float64 reference is then made on the CPU, as exact, and the grade goes on."""
    from grader.checks.checking import load_reference, reference_outputs

    def full(*args):
        raise getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)("CUDA out of memory")

    monkeypatch.setattr(heavy, "_on_the_gpu", full)
    target = _backward()
    case = target.spec.cases[1]
    inputs = generate(target.spec, case, seed=3)
    got = heavy._reference(target.spec, inputs, case.params)
    want = reference_outputs(load_reference(target.spec.folder / "reference.py"), target.spec, inputs, case.params)
    assert len(got) == len(want) and all(torch.equal(g, w) for g, w in zip(got, want))


def test_a_gpu_out_of_memory_draws_the_inputs_with_the_transforms_on_the_cpu(monkeypatch):
    import grader.checks.inputs as inputs

    real = inputs.generate

    def full_on_the_gpu(spec, case, seed, trial=0, device="cpu"):
        if device == "cuda":
            raise getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)("CUDA out of memory")
        return real(spec, case, seed, trial, device)

    monkeypatch.setattr(inputs, "generate", full_on_the_gpu)
    target = _backward()
    case = target.spec.cases[1]
    got = heavy._generate(target.spec, case, 3, 0)
    want = real(target.spec, case, 3)
    assert got.keys() == want.keys() and all(torch.equal(got[n], want[n]) for n in want)


def test_a_gpu_reference_comes_back_as_float32_only_where_the_tolerance_hides_the_rounding(monkeypatch):
    """Half the bytes copied back and read: the attention backward's 16-bit gradients (rtol 1e-2 and more) come back
    as float32, rounded from the float64 answer; a float64 output or an rtol below NARROW_RTOL stays float64."""
    import dataclasses

    from grader.checks.checking import NARROW_RTOL, load_reference, narrowable, reference_outputs

    target = _backward()
    case = target.spec.cases[1]
    assert narrowable(target.spec, case) == [True, True, True]
    monkeypatch.setattr(heavy, "_on_the_gpu", lambda *a: (_ for _ in ()).throw(torch.cuda.OutOfMemoryError("full")))
    inputs = generate(target.spec, case, seed=3)
    got = heavy._reference(target.spec, inputs, case.params, "reference", narrowable(target.spec, case))
    want = reference_outputs(load_reference(target.spec.folder / "reference.py"), target.spec, inputs, case.params)
    assert all(g.dtype == torch.float32 and torch.equal(g, w.float()) for g, w in zip(got, want))
    assert all(((g.double() - w).abs() <= 2**-24 * w.abs()).all() for g, w in zip(got, want))

    tight = {name: dataclasses.replace(tol, rtol=NARROW_RTOL / 10) for name, tol in target.spec.tolerance.items()}
    assert narrowable(dataclasses.replace(target.spec, tolerance=tight), case) == [False] * 3
    doubles = [dataclasses.replace(out, dtype="float64") for out in target.spec.outputs]
    assert narrowable(dataclasses.replace(target.spec, outputs=doubles), case) == [False] * 3


@pytest.mark.gpu
def test_the_gpu_process_writes_the_cpus_inputs_and_their_references_equal_the_cpus(tmp_path):
    """The real process: what it writes for the child is what it hands the grader where asked, and is the CPU's
    draw (its transforms computed on the GPU); the references of what it kept equal the CPU's of the written
    files, and those marked narrow are the same rounded to float32."""
    from grader.checks.checking import load_reference, reference_outputs
    from grader.checks.inputs import load_tensor

    target = _backward()
    case = target.spec.cases[2]
    compute = heavy.GpuCompute(target.spec)
    try:
        metas, kept = compute.draw(case, 5, 0, tmp_path, "t0", keep=True)
        on_gpu = compute.reference_of_drawn(tmp_path, "t0").result()
        compute.draw(case, 5, 0, tmp_path, "t1", keep=False, narrow=[True, False, True])
        narrowed = compute.reference_of_drawn(tmp_path, "t1").result()
        busy = compute.busy()
    finally:
        compute.shutdown()
    written = {name: load_tensor(meta) for name, meta in metas.items()}
    assert set(kept) == set(written) and all(torch.equal(kept[n], written[n]) for n in kept)
    cpu_inputs = generate(target.spec, case, seed=5)
    assert all(torch.allclose(written[n].double(), cpu_inputs[n].double(), rtol=0, atol=1e-3) for n in written)
    on_cpu = reference_outputs(load_reference(target.spec.folder / "reference.py"), target.spec, written, case.params)
    assert all(torch.allclose(a, b, rtol=1e-9, atol=1e-9) for a, b in zip(on_gpu, on_cpu))
    assert [t.dtype for t in narrowed] == [torch.float32, torch.float64, torch.float32]
    assert all(torch.equal(n, g.to(n.dtype)) for n, g in zip(narrowed, on_gpu))
    assert busy["gpu_inputs"] > 0 and busy["input_files"] > 0 and busy["gpu_references"] > 0, busy


@pytest.mark.slow
def test_the_reference_process_sees_only_the_grading_childs_gpu():
    # grade-batch and validate grade on several GPUs from one process: each grade's references must run on
    # its own child's GPU, not on GPU 0 while another grade is timed there
    import os

    compute = heavy.GpuCompute(_backward().spec, visible_devices="1")
    try:
        assert compute.executor.submit(os.getenv, "CUDA_VISIBLE_DEVICES").result(timeout=120) == "1"
    finally:
        compute.shutdown()


@pytest.mark.parametrize("exercise", ["matmul", "flash_attention_v2", "flash_attention_v2_backward", "linear_gelu"])
def test_small_cases_stay_on_the_cpu_and_the_timed_sizes_go_to_the_gpu(exercise):
    """The first trials must not wait for the GPU process to start (seconds): a case whose float64 reference
    is cheap is drawn and checked on the CPU; the timed sizes, up to a TFLOP each, are the GPU's."""
    target = resolve((exercise,))
    spec, variant = target.spec, target.variant
    assert not heavy.worth_it(spec, variant, spec.cases[0])
    assert all(heavy.worth_it(spec, variant, case) for case in spec.performance.cases)


def test_a_spec_without_a_work_model_keeps_every_case_on_the_gpu():
    import dataclasses

    target = resolve(("softmax",))
    spec = dataclasses.replace(target.spec, performance=dataclasses.replace(target.spec.performance, flops=None))
    assert heavy.worth_it(spec, target.variant, spec.cases[0])


@pytest.mark.slow
def test_the_gpu_process_waits_until_the_child_is_ready():
    """A grading child's first job on a machine is measuring the GPU's copy and matmul ceilings: a float64
    reference beside it would make them read low (and a low ceiling is kept). Work waits for the gate."""
    import threading
    import time
    from concurrent.futures import Future

    submitted = []

    class Executor:
        def submit(self, *args):
            submitted.append(time.monotonic())
            future = Future()
            future.set_result((({}, {}, 0.0), 0.0))  # a draw's answer: (metadata, inputs, files' seconds), seconds
            return future

        def shutdown(self, **_):
            pass

    gate = threading.Event()
    compute = heavy.GpuCompute(_backward().spec, gate=gate)
    compute.executor.shutdown()
    compute.executor = Executor()
    worker = threading.Thread(target=compute.draw, args=(_backward().spec.cases[0], 1, 0, "/tmp", 0, False))
    worker.start()
    time.sleep(0.3)
    assert not submitted
    opened = time.monotonic()
    gate.set()
    worker.join(5)
    assert submitted and submitted[0] >= opened


class _InProcess:
    """An executor that runs each task at once, in this process: GpuCompute without spawning its process."""

    def submit(self, function, *args):
        from concurrent.futures import Future

        future = Future()
        try:
            future.set_result(function(*args))
        except Exception as exc:
            future.set_exception(exc)
        return future

    def shutdown(self, **_):
        pass


def test_the_gpu_process_counts_the_seconds_of_its_inputs_files_and_references(monkeypatch, tmp_path):
    """What a heavy grade's wait for its timed sizes was made of (shown beside its phases): each task's seconds,
    counted where it ran, its answer passed through unchanged, and a failing task's error raised where it is read."""
    import time

    def slow(answer, seconds):
        def task(*_):
            time.sleep(seconds)
            return answer

        return task

    monkeypatch.setattr(heavy, "_start", lambda *_: (_InProcess(), None))
    compute = heavy.GpuCompute(_backward().spec)
    assert compute.busy() == {"gpu_inputs": 0.0, "input_files": 0.0, "gpu_references": 0.0}
    monkeypatch.setattr(heavy, "_generate", slow({"q": torch.ones(2**22)}, 0.05))  # 16 MB to write
    monkeypatch.setattr(heavy, "_reference", slow([2], 0.1))
    case = _backward().spec.cases[0]
    assert compute.draw(case, 1, 0, tmp_path, 0, keep=False)[1] == {}
    assert compute.reference_of_drawn(tmp_path, 0).result() == [2]
    busy = compute.busy()
    assert 0.05 <= busy["gpu_inputs"] < 5 and 0.1 <= busy["gpu_references"] < 5, busy  # slept 0.05 and 0.1 s
    assert busy["input_files"] > 0  # 16 MB written

    def broken(*_):
        raise RuntimeError("the reference failed")

    monkeypatch.setattr(heavy, "_reference", broken)
    compute.draw(case, 1, 0, tmp_path, 1, keep=False)
    with pytest.raises(RuntimeError, match="the reference failed"):
        compute.reference_of_drawn(tmp_path, 1).result()
    assert compute.busy()["gpu_references"] == busy["gpu_references"]
    heavy._drawn.clear()


def _on_this_cpu(monkeypatch):
    """GpuCompute's process work done here, on the CPU: its draws and references as the CPU path makes them."""
    from grader.checks.checking import narrowed, reference_outputs

    monkeypatch.setattr(heavy, "_start", lambda *_: (_InProcess(), None))
    monkeypatch.setattr(heavy, "_generate", lambda spec, case, seed, trial: generate(spec, case, seed, trial))
    on_cpu = lambda reference, spec, inputs, params, narrow: narrowed(  # noqa: E731
        list(reference_outputs(reference, spec, inputs, params)), narrow
    )
    monkeypatch.setattr(heavy, "_on_the_gpu", on_cpu)


def test_inputs_drawn_in_the_gpu_process_are_written_there_and_referenced_without_crossing(monkeypatch, tmp_path):
    """A timed size's inputs (a gigabyte for the attention backward) are written for the child by the GPU process
    and kept there for their reference: the grader gets the files' metadata and the references, and the inputs
    only where it reads them again. The references are those of the written inputs; then the process lets go."""
    from grader.checks.checking import load_reference, narrowable, reference_outputs
    from grader.checks.inputs import load_tensor

    _on_this_cpu(monkeypatch)
    target = _backward()
    case = target.spec.cases[2]
    compute = heavy.GpuCompute(target.spec)
    narrow = narrowable(target.spec, case)
    metas, kept = compute.draw(case, 5, 0, tmp_path, "t3", keep=False, narrow=narrow)
    assert kept == {} and heavy._drawn
    written = {name: load_tensor(meta) for name, meta in metas.items()}
    assert all(torch.equal(written[n], t) for n, t in generate(target.spec, case, 5).items())
    assert {m["path"] for m in metas.values()} == {str(tmp_path / f"in-t3-{n}.bin") for n in written}
    got = compute.reference_of_drawn(tmp_path, "t3").result()
    want = reference_outputs(load_reference(target.spec.folder / "reference.py"), target.spec, written, case.params)
    assert all(torch.equal(g, w.float() if n else w) for g, w, n in zip(got, want, narrow))
    assert not heavy._drawn
    _, kept = compute.draw(case, 5, 0, tmp_path, "t4", keep=True)
    assert set(kept) == set(written) and all(torch.equal(kept[n], written[n]) for n in kept)
    assert compute.busy()["input_files"] > 0
    heavy._drawn.clear()


@pytest.mark.parametrize("beside", [False, True], ids=["in_turn", "beside_the_draws"])
def test_references_computed_beside_the_draws_are_the_same_and_asked_for_only_when_read(monkeypatch, tmp_path, beside):
    """KCOURSE_REFERENCES_BESIDE=1: the process starts each case's references on a thread of its own as soon as its
    inputs are written, and the grader asks for them only when it reads them (a request sent at once would wait,
    in the process's queue, ahead of the next draws). The answers are the same either way."""
    from grader.checks.checking import load_reference, narrowable, reference_outputs
    from grader.checks.inputs import load_tensor

    _on_this_cpu(monkeypatch)
    monkeypatch.setenv(heavy.BESIDE_ENV, "1" if beside else "0")
    submitted = []
    executor = _InProcess()
    real_submit = executor.submit
    executor.submit = lambda function, *args: submitted.append(function) or real_submit(function, *args)
    monkeypatch.setattr(heavy, "_start", lambda *_: (executor, None))
    target = _backward()
    case = target.spec.cases[2]
    compute = heavy.GpuCompute(target.spec)
    narrow = narrowable(target.spec, case)
    metas, _ = compute.draw(case, 5, 0, tmp_path, "t0", keep=False, narrow=narrow)
    future = compute.reference_of_drawn(tmp_path, "t0")
    assert (heavy._reference_of_drawn in submitted) is not beside
    got = future.result()
    assert submitted.count(heavy._reference_of_drawn) == 1 and future.result() is got
    written = {name: load_tensor(meta) for name, meta in metas.items()}
    want = reference_outputs(load_reference(target.spec.folder / "reference.py"), target.spec, written, case.params)
    assert all(torch.equal(g, w.float() if n else w) for g, w, n in zip(got, want, narrow))
    assert not heavy._drawn and compute.busy()["gpu_references"] > 0


def test_references_beside_the_draws_let_the_next_draw_start_before_they_end(monkeypatch, tmp_path):
    """Three cases drawn, then their references read, in a one-worker process (a thread stands in): in turn, each
    reference is waited for before the next draw (six steps of 0.4 s); beside the draws, the next draw overlaps it
    (four steps)."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    def after(seconds, answer):
        return lambda *_: time.sleep(seconds) or answer

    monkeypatch.setattr(heavy, "_generate", after(0.4, {"q": torch.ones(4)}))
    monkeypatch.setattr(heavy, "_reference", after(0.4, [1]))
    case = _backward().spec.cases[0]
    took = {}
    for beside in ("0", "1"):
        monkeypatch.setenv(heavy.BESIDE_ENV, beside)
        process = ThreadPoolExecutor(1)
        monkeypatch.setattr(heavy, "_start", lambda *_: (process, None))
        compute = heavy.GpuCompute(_backward().spec)
        started = time.monotonic()
        futures = []
        for key in range(3):
            compute.draw(case, 1, 0, tmp_path, key, keep=False)
            futures.append(compute.reference_of_drawn(tmp_path, key))
        assert [f.result() for f in futures] == [[1]] * 3
        took[beside] = time.monotonic() - started
        process.shutdown()
    assert took["0"] >= 2.4 and took["1"] < 2.1, took


@pytest.mark.slow
def test_the_gpu_process_warms_up_as_soon_as_it_is_made():
    """Its start (spawn, torch, the reference, a CUDA context: seconds) must pass while the child starts and
    nvcc builds, not when the first heavy case asks for a reference. Where CUDA is missing the warm-up still
    ends (the first real task reports the problem)."""
    spec = _backward().spec
    heavy._references.clear()
    heavy._warm_up(spec, "reference")
    assert f"{spec.folder}:reference" in heavy._references

    compute = heavy.GpuCompute(spec)
    try:
        assert compute.warm_up.result(timeout=120) is None  # submitted at construction; ends without CUDA too
    finally:
        compute.shutdown()


def test_ending_a_grade_ends_the_gpu_process_at_once_even_while_it_warms_up():
    """A learner's build error ends the grade within a second or two: the process still importing torch
    for its warm-up is stopped, not waited for (the exit handlers would wait for its running task)."""
    import time

    def ended(pid: int) -> bool:  # gone, or a zombie the pool has not reaped yet (Linux's /proc)
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:  # no such file, or no such process while it is read
            return True

    compute = heavy.GpuCompute(_backward().spec)
    deadline = time.monotonic() + 60
    while not compute.executor._processes and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = list(compute.executor._processes)
    started = time.monotonic()
    compute.shutdown()
    while not all(ended(pid) for pid in pids) and time.monotonic() - started < 10:
        time.sleep(0.02)
    assert time.monotonic() - started < 1.5  # its warm-up alone takes seconds (spawn, torch)


def test_where_grades_share_the_gpu_the_gpu_process_is_gone_when_shutdown_returns(monkeypatch, tmp_path):
    """With the GPU lock on (the parallel GPU tests), ending a grade's GPU process waits until it has exited: its
    CUDA context is torn down before the grade lets go of the GPU, not while another grade times."""
    monkeypatch.setenv("KCOURSE_GPU_LOCK", str(tmp_path / "gpu.lock"))
    monkeypatch.delenv("KCOURSE_GPU_LOCK_HELD", raising=False)
    compute = heavy.GpuCompute(_backward().spec)
    processes = list(compute.executor._processes.values())
    compute.shutdown()
    assert processes and not any(process.is_alive() for process in processes)


def test_a_process_started_before_the_grade_is_taken_up_by_it(monkeypatch):
    """`kcourse grade` starts the GPU process before it imports torch (its start-up then overlaps the
    grader's and the child's); the grade's GpuCompute takes that one up rather than starting another,
    and one started for a grade that never got that far is ended."""
    monkeypatch.setattr("grader.toolchain.build.gpu_arch", lambda: "sm_90")
    spec = _backward().spec
    heavy.start_early(spec, "reference", None)
    early = heavy._early[heavy._early_key(spec, "reference", None)][0]
    compute = heavy.GpuCompute(spec, "reference")
    try:
        assert compute.executor is early and not heavy._early
    finally:
        compute.shutdown()

    heavy.start_early(spec, "reference", "1")
    assert heavy._early
    heavy.discard_early()
    assert not heavy._early


def test_the_module_the_grader_starts_it_from_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, grader.run.heavy; print('torch' in sys.modules)"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )

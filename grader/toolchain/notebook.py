"""Notebooks: `kcourse notebook day4` writes replace_op.ipynb (nbformat), and `kcourse grade ... --file
X.ipynb` grades the code cells tagged `kcourse` as the learner's Triton file.

A written notebook holds no absolute path (it finds the exercise's reference.py from the folder Jupyter runs
it in, the notebook's, upward), so it can be moved, shared or committed; the files it and its grade make
(replace_op.ipynb, replace_op_trace.json, .ipynb_checkpoints/) are in .gitignore. Jupyter itself is the
`notebook` extra: pip install -e '.[notebook]'. A grade of a notebook names the notebook (`load:
replace_op.ipynb.py`, the tagged cells as one file), not the stub's name."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from grader.core import exprs
from grader.core.discovery import Target
from grader.core.errors import KcourseError
from grader.core.paths import state_dir
from grader.core.spec import Case, ExerciseSpec, TensorSpec

TAG = "kcourse"
NO_GPU_TIMING = "no GPU: timing skipped (the Triton interpreter runs on the CPU; its speed says nothing about a GPU's)"


class NotebookError(KcourseError, ValueError):
    pass


def replace_op_notebook(target: Target, name: str = "replace_op.ipynb") -> nbformat.NotebookNode:
    """`name`: the notebook's file name, for the grade command it shows."""
    spec, variant = target.spec, target.variant
    call = f"{variant.entry}({', '.join(a.name for a in variant.args)})"
    nb = new_notebook()
    nb.cells = [
        new_markdown_cell(
            f"# Day 4 — replace a PyTorch operator with Triton: `{spec.id}`\n\n"
            f"{spec.title}. Write your kernel in the cell tagged `{TAG}` (keep the tag: the grader reads only "
            f"tagged cells), run the check and the profiler, then grade from a terminal:\n\n"
            f"    kcourse grade {spec.id} --lang {variant.lang} --file {name}\n\n"
            "Without a GPU the notebook runs your kernel under the Triton interpreter on the CPU, as the "
            "grader does: the check is real, the timings are skipped."
        ),
        new_code_cell(_setup_source(spec)),
        new_code_cell((spec.folder / variant.stub).read_text(), metadata={"tags": [TAG]}),
        new_code_cell(_check_source(spec, call)),
        new_code_cell(_profile_source(spec, call)),
        new_markdown_cell(
            "## Notes\n\nWhat did the profiler show? Then `kcourse profile " + spec.id + "` and `kcourse report day4`."
        ),
    ]
    return nb


def _setup_source(spec: ExerciseSpec) -> str:
    """Device, the interpreter switch, inputs and the PyTorch baseline."""
    inputs = ", ".join(t.name for t in spec.inputs)
    sizes = {
        device: {t.name: _shape(t, case) for t in [*spec.inputs, *spec.outputs]}
        for device, case in (("cuda", _gpu_case(spec)), ("cpu", _cpu_case(spec)))
    }
    make = "\n".join(f"{t.name} = torch.randn(sizes[{t.name!r}], device=device)" for t in spec.inputs)
    return (
        "import importlib.util\nimport os\nimport pathlib\n\nimport torch\n\n"
        "# Without a GPU, Triton runs kernels under its interpreter on the CPU, as the grader does there. The switch\n"
        "# is set before triton is imported, so every @triton.jit below sees it.\n"
        "device = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
        "if device == 'cpu':\n    os.environ['TRITON_INTERPRET'] = '1'\n"
        "import triton\n\n"
        "# on a GPU the exercise's largest timed size; on the CPU one the interpreter runs in seconds\n"
        f"sizes = {sizes!r}[device]\n{make}\n\n"
        "# the PyTorch baseline you are replacing: the exercise's reference.py, looked for from this notebook's folder\n"
        "# upward (Jupyter runs a notebook in its own folder), then in the kit at KCOURSE_ROOT, then in the kit whose\n"
        "# grader this Python has installed (pip install -e .): no path of one machine is written here\n"
        f"wanted = pathlib.Path('exercises', {spec.folder.name!r}, 'reference.py')\n"
        "here = pathlib.Path.cwd()\n"
        "folders = [here, *here.parents] + [pathlib.Path(p) for p in [os.environ.get('KCOURSE_ROOT')] if p]\n"
        "try:\n    from grader.core.paths import course_root\n    folders.append(course_root())\n"
        "except ImportError:\n    pass\n"
        "found = next((folder / wanted for folder in folders if (folder / wanted).is_file()), None)\n"
        "if found is None:\n"
        "    raise FileNotFoundError(f'{wanted} not found in {here} or above: open this notebook from inside the kit, '\n"
        "                            'or set KCOURSE_ROOT to the kit folder')\n"
        "spec = importlib.util.spec_from_file_location('reference', found)\n"
        "reference = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(reference)\n"
        f"expected = reference.reference({inputs})\n"
        "if device == 'cuda':\n"
        f"    print('torch: %.4f ms' % triton.testing.do_bench(lambda: reference.reference({inputs})))\n"
        f"else:\n    print({NO_GPU_TIMING!r})\n"
    )


def _check_source(spec: ExerciseSpec, call: str) -> str:
    outs = "\n".join(f"{t.name} = torch.empty(sizes[{t.name!r}], device=device)" for t in spec.outputs)
    out_names = ", ".join(t.name for t in spec.outputs)
    return (
        f"{outs}\n{call}\n"
        f"torch.testing.assert_close({out_names}, expected.to({out_names}.dtype))\nprint('matches the baseline')\n"
        "if device == 'cuda':\n"
        f"    print('yours: %.4f ms' % triton.testing.do_bench(lambda: {call}))\n"
        f"else:\n    print({NO_GPU_TIMING!r})\n"
    )


def _profile_source(spec: ExerciseSpec, call: str) -> str:
    # labelled ranges: under the interpreter a kernel runs no torch operator, so it has no row of its own
    inputs = ", ".join(t.name for t in spec.inputs)
    return (
        "from torch.profiler import ProfilerActivity, profile, record_function\n\n"
        "activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == 'cuda' else [])\n"
        "with profile(activities=activities) as prof:\n    for _ in range(5):\n"
        f"        with record_function('yours'):\n            {call}\n"
        f"        with record_function('torch baseline'):\n            reference.reference({inputs})\n"
        "print(prof.key_averages().table(sort_by='self_cuda_time_total' if device == 'cuda' else 'cpu_time_total', "
        "row_limit=12))\nprof.export_chrome_trace('replace_op_trace.json')\n"
    )


def _gpu_case(spec: ExerciseSpec) -> Case:
    return spec.performance.cases[-1] if spec.performance.cases else spec.cases[-1]


def _cpu_case(spec: ExerciseSpec) -> Case:
    """The largest float32 case the grader runs under the interpreter: big enough to mean something, quick there."""
    cpu_cases = [c for c in spec.cases if not c.gpu_only and c.dtype == "float32"] or spec.cases[:1]
    return max(cpu_cases, key=lambda c: math.prod(_shape(spec.inputs[0], c)))


def _shape(tensor: TensorSpec, case: Case) -> tuple[int, ...]:
    return tuple(exprs.evaluate_int(d, case.params) for d in tensor.shape)


def write_notebook(target: Target, path: Path, force: bool = False) -> Path:
    if ".ipynb" not in target.variant.kind_of.suffixes:
        raise NotebookError(
            f"{target.spec.id} ({target.variant.lang}) is not a Triton exercise: notebooks hold Triton code"
        )
    if path.exists() and not force:
        raise NotebookError(f"{path} exists (your work?): pass --force to overwrite it, or --out another file")
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(replace_op_notebook(target, path.name), str(path))
    return path


def extract_submission(notebook: Path, target: Target) -> Path:
    """The tagged code cells as one .py file named after the notebook (replace_op.ipynb.py: a grade's `load`
    line names the notebook, not the stub), in the state folder."""
    if ".ipynb" not in target.variant.kind_of.suffixes:
        raise NotebookError("only Triton exercises can be graded from a notebook")
    try:
        nb = nbformat.read(str(notebook), as_version=4)
    except Exception as exc:  # nbformat raises several kinds for a broken file
        raise NotebookError(f"{notebook.name} is not a readable notebook: {exc}") from None
    cells = [
        (i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code" and TAG in c.get("metadata", {}).get("tags", [])
    ]
    if not cells:
        raise NotebookError(f"{notebook.name} has no code cell tagged `{TAG}`: tag the cell that holds your kernel")
    code = "\n\n".join(f"# --- {notebook.name}, cell {i + 1} ---\n{c.source}" for i, c in cells)
    folder = state_dir() / "notebook_submissions" / hashlib.sha256(code.encode()).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{notebook.name}.py"
    path.write_text(code + "\n")
    return path

"""Notebooks: `kcourse notebook day4` writes replace_op.ipynb (nbformat), and `kcourse grade ... --file
X.ipynb` grades the code cells tagged `kcourse` as the learner's Triton file."""

from __future__ import annotations

import hashlib
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from grader import exprs
from grader.discovery import Target
from grader.paths import state_dir

TAG = "kcourse"


class NotebookError(ValueError):
    pass


def replace_op_notebook(target: Target) -> nbformat.NotebookNode:
    spec, variant = target.spec, target.variant
    stub = (spec.folder / variant.stub).read_text()
    case = spec.performance.cases[-1] if spec.performance.cases else spec.cases[-1]
    shapes = {t.name: [int(eval_dim(d, case.params)) for d in t.shape] for t in spec.inputs}
    make = "\n".join(f"{name} = torch.randn({tuple(shape)}, device=device)" for name, shape in shapes.items())
    inputs = ", ".join(shapes)
    outs = "\n".join(f"{t.name} = torch.empty({tuple(int(eval_dim(d, case.params)) for d in t.shape)}, device=device)"
                     for t in spec.outputs)
    out_names = ", ".join(t.name for t in spec.outputs)
    nb = new_notebook()
    nb.cells = [
        new_markdown_cell(f"# Day 4 — replace a PyTorch operator with Triton: `{spec.id}`\n\n"
                          f"{spec.title}. Write your kernel in the cell tagged `{TAG}` (keep the tag: the grader reads only "
                          f"tagged cells), run the check and the profiler, then grade from a terminal:\n\n"
                          f"    kcourse grade {spec.id} --lang {variant.lang} --file replace_op.ipynb\n"),
        new_code_cell("import torch\nimport triton\n\ndevice = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
                      f"{make}\n\n# the PyTorch baseline you are replacing\n"
                      f"import importlib.util, pathlib\nspec = importlib.util.spec_from_file_location('reference', "
                      f"pathlib.Path({str(spec.folder / 'reference.py')!r}))\nreference = importlib.util.module_from_spec(spec)\n"
                      f"spec.loader.exec_module(reference)\nexpected = reference.reference({inputs})\n"
                      "if device == 'cuda':\n"
                      f"    print('torch: %.4f ms' % triton.testing.do_bench(lambda: reference.reference({inputs})))"),
        new_code_cell(stub, metadata={"tags": [TAG]}),
        new_code_cell(f"{outs}\n{variant.entry}({', '.join(a.name for a in variant.args)})\n"
                      f"torch.testing.assert_close({out_names}, expected.to({out_names}.dtype))\nprint('matches the baseline')\n"
                      "if device == 'cuda':\n"
                      f"    print('yours: %.4f ms' % triton.testing.do_bench(lambda: {variant.entry}({', '.join(a.name for a in variant.args)})))"),
        new_code_cell("from torch.profiler import profile, ProfilerActivity\n"
                      "activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == 'cuda' else [])\n"
                      f"with profile(activities=activities) as prof:\n    for _ in range(5):\n"
                      f"        {variant.entry}({', '.join(a.name for a in variant.args)})\n"
                      "        reference.reference(" + inputs + ")\n"
                      "print(prof.key_averages().table(sort_by='self_cuda_time_total' if device == 'cuda' else 'self_cpu_time_total', row_limit=12))\n"
                      "prof.export_chrome_trace('replace_op_trace.json')"),
        new_markdown_cell("## Notes\n\nWhat did the profiler show? Then `kcourse profile " + spec.id + "` and `kcourse report day4`."),
    ]
    return nb


def eval_dim(dim, params) -> int:
    return exprs.evaluate_int(dim, params)


def write_notebook(target: Target, path: Path, force: bool = False) -> Path:
    if target.variant.kind != "triton":
        raise NotebookError(f"{target.spec.id} ({target.variant.lang}) is not a Triton exercise: notebooks hold Triton code")
    if path.exists() and not force:
        raise NotebookError(f"{path} exists (your work?): pass --force to overwrite it, or --out another file")
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(replace_op_notebook(target), str(path))
    return path


def extract_submission(notebook: Path, target: Target) -> Path:
    """The tagged code cells as one .py file named like the stub, in the state folder."""
    if target.variant.kind != "triton":
        raise NotebookError("only Triton exercises can be graded from a notebook")
    try:
        nb = nbformat.read(str(notebook), as_version=4)
    except Exception as exc:  # nbformat raises several kinds for a broken file
        raise NotebookError(f"{notebook.name} is not a readable notebook: {exc}") from None
    cells = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code" and TAG in c.get("metadata", {}).get("tags", [])]
    if not cells:
        raise NotebookError(f"{notebook.name} has no code cell tagged `{TAG}`: tag the cell that holds your kernel")
    code = "\n\n".join(f"# --- {notebook.name}, cell {i + 1} ---\n{c.source}" for i, c in cells)
    folder = state_dir() / "notebook_submissions" / hashlib.sha256(code.encode()).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / target.variant.stub
    path.write_text(code + "\n")
    return path

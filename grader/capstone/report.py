"""What the capstone and block records look like: console tables, the loss plot, the Markdown report
(templates/capstone_report.md.j2, templates/block_report.md.j2). Renderings of the record, never recomputed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grader.capstone.run import final_loss
from grader.reports.console import table

RUN_NAMES = {"eager": "PyTorch eager", "compile": "torch.compile", "kernels": "your kernels"}


def size_text(nbytes: float | None) -> str:
    if nbytes is None:
        return "—"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.0f} B"


def operation_rows(choices: list[dict[str, Any]]) -> list[list[str]]:
    """One row per operation: forward (or step) and backward, each "yours (exercise, lang)" or "PyTorch: why"."""
    rows: dict[str, dict[str, str]] = {}
    for c in choices:
        text = f"yours ({c['exercise']}, {c['lang']})" if c.get("exercise") else f"PyTorch — {c['reason']}"
        rows.setdefault(c["operation"], {})[c["role"]] = text
    return [
        [
            op,
            roles.get("forward") or roles.get("step", ""),
            roles.get(
                "backward",
                "PyTorch — recomputed from the saved inputs (no backward exercise)" if "forward" in roles else "—",
            ),
        ]
        for op, roles in rows.items()
    ]


def run_rows(record: dict[str, Any]) -> list[list[str]]:
    window = record["config"]["final_window"]
    eager = record["runs"].get("eager", {}).get("tokens_per_s")
    rows = []
    for name, label in RUN_NAMES.items():
        run = record["runs"].get(name)
        if run is None:
            continue
        loss, rate = final_loss(run, window), run.get("tokens_per_s")
        status = (
            "failed"
            if run.get("failed")
            else f"NaN at step {run['nan_at'] + 1}"
            if run.get("nan_at") is not None
            else "ok"
        )
        rows.append(
            [
                label,
                f"{loss:.4f}" if loss is not None else "—",
                f"{rate:,.0f}" if rate else "—",
                f"{rate / eager:.2f}x" if rate and eager else "—",
                size_text(run.get("peak_bytes")),
                f"{run.get('seconds', 0):.1f}",
                status,
            ]
        )
    return rows


def operation_lines(choices: list[dict[str, Any]]) -> list[str]:
    """The operation table as lines (its reasons are too long for terminal columns)."""
    return [f"{op}: forward/step {fwd}; backward {bwd}" for op, fwd, bwd in operation_rows(choices)]


RUN_HEADER = ["run", "final loss", "tokens/s", "vs eager", "peak memory", "seconds", "status"]
OPERATION_HEADER = ["operation", "forward (or step)", "backward"]


def format_capstone(record: dict[str, Any], report: Path | None = None) -> str:
    cfg = record["config"]
    params = next((r.get("parameters") for r in record["runs"].values() if r.get("parameters")), None)
    lines = [
        f"capstone: GPT {cfg['layers']} layers, {cfg['heads']} heads, d={cfg['d_model']}, context {cfg['context']}, "
        f"batch {cfg['batch']}, {cfg['steps']} steps"
        + (f", {params / 1e6:.2f}M parameters" if params else "")
        + f"; {cfg['low_precision']} matmuls; seed {record['seed']}; data: {record['data']}; "
        f"device: {record['device'].get('name', '?')}",
        "",
        *operation_lines(record["choices"]),
        "",
        table(run_rows(record), RUN_HEADER),
        "",
    ]
    lines += [f"{c['name']}: {c['status']}: {c['message']}" for c in record["checks"]]
    if not cfg.get("compile"):
        lines.append(
            "torch.compile baseline: not run ("
            + (
                "the CPU: inductor compiles C++ for longer than the tiny run; --compile forces it"
                if record.get("tiny")
                else "--no-compile"
            )
            + ")"
        )
    lines.append(f"verdict: {record['status']}: {record['verdict']}")
    if report:
        lines.append(f"report: {report}")
    return "\n".join(lines)


def block_rows(record: dict[str, Any]) -> list[list[str]]:
    parts = (record.get("result") or {}).get("parts") or {}
    checks = {c["name"]: c["status"] for c in record["checks"]}
    return [
        [
            part,
            f"{f['error']:.3g} ({f['worst']})",
            f"{f['torch_error']:.3g} ({f['torch_worst']})",
            checks.get(part, "?"),
            whose_text(record["whose"].get(part, [])),
        ]
        for part, f in parts.items()
    ]


def whose_text(lines: list[str]) -> str:
    """ "yours: layer_norm forward, gelu forward; PyTorch: linear forward, ..." from whose_parts' lines."""
    yours = [line.split(":")[0] for line in lines if ": yours" in line]
    theirs = [line.split(":")[0] for line in lines if ": yours" not in line]
    return f"yours: {', '.join(yours) or 'nothing'}; PyTorch: {', '.join(theirs) or 'nothing'}"


BLOCK_HEADER = ["part", "yours vs float64", "PyTorch vs float64", "status", "whose"]


def format_block(record: dict[str, Any], report: Path | None = None) -> str:
    cfg, result = record["config"], record.get("result") or {}
    lines = [
        f"transformer block: B={cfg['batch']} T={cfg['context']} C={cfg['d_model']} heads={cfg['heads']}, "
        f"{cfg['low_precision']} matmuls, float32 residual; forward and backward against the float64 PyTorch block; "
        f"seed {record['seed']}; device: {record['device'].get('name', '?')}",
        "",
    ]
    if result.get("parts"):
        lines += [
            table(block_rows(record), BLOCK_HEADER),
            "",
            f"forward + backward of the whole block: yours {result['ms']:.3f} ms, PyTorch {result['torch_ms']:.3f} ms",
        ]
    lines += [f"{c['name']}: {c['status']}: {c['message']}" for c in record["checks"] if c["status"] != "passed"]
    lines.append(f"verdict: {record['status']}: {record['verdict']}")
    if report:
        lines.append(f"report: {report}")
    return "\n".join(lines)


# --- the plot and the Markdown report ------------------------------------------------------------------------


def loss_plot(record: dict[str, Any], path: Path) -> Path | None:
    from grader.reports import plots  # matplotlib, headless

    plt = plots.plt
    runs = [(RUN_NAMES[n], r) for n, r in record["runs"].items() if n in RUN_NAMES and r.get("losses")]
    if not runs:
        return None
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    colors = {
        "PyTorch eager": plots.COLORS["torch"],
        "torch.compile": plots.COLORS["solution"],
        "your kernels": plots.COLORS["learner"],
    }
    for label, run in runs:
        losses = run["losses"]
        ax.plot(
            range(1, len(losses) + 1),
            [v if v is not None else float("nan") for v in losses],
            label=label,
            color=colors[label],
            lw=1.2,
            alpha=0.9,
        )
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (nats per byte)")
    ax.set_title("Capstone: loss curves, same seed and batches")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def render(record: dict[str, Any], out_dir: Path | None = None) -> Path:
    """The record's Markdown report (and, for the capstone, its loss plot) in the reports folder."""
    from grader.reports.reporting import environment, reports_dir

    out_dir = out_dir or reports_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    kind = record["kind"]
    data: dict[str, Any] = {"record": record, "checks": record["checks"]}
    if kind == "capstone":
        plot = loss_plot(record, out_dir / "capstone_loss.png")
        data.update(
            plot=plot.name if plot else "",
            operations=operation_rows(record["choices"]),
            runs=run_rows(record),
            operation_header=OPERATION_HEADER,
            run_header=RUN_HEADER,
            summary=format_capstone(record).splitlines()[0],
        )
    else:
        data.update(rows=block_rows(record), header=BLOCK_HEADER, summary=format_block(record).splitlines()[0])
    text = environment().get_template(f"{kind}_report.md.j2").render(**data)
    path = out_dir / f"{kind}_report.md"
    path.write_text(text)
    return path

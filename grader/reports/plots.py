"""PNG plots for the reports (matplotlib, headless): a roofline chart of the learner's kernels and,
per exercise, achieved speed against problem size for the learner, the solution and torch; for
`kcourse compare`, a bar per version; for a failed grade, where its output was wrong (output_map.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import ScalarFormatter  # noqa: E402

COLORS = {"learner": "#d62728", "solution": "#1f77b4", "torch": "#2ca02c", "roof": "#444444"}


def _ceilings(grades: list, env: dict | None) -> tuple[float | None, float | None]:
    """(GB/s, TFLOP/s): from the env check, else from the device recorded with a grade (an old env
    record may name a GPU without its measured ceilings)."""
    if env and env.get("gpu") and env["gpu"].get("copy_gbps"):
        return env["gpu"]["copy_gbps"], env["gpu"].get("matmul_fp32_tflops")
    for g in grades:
        if g.device.get("copy_gbps"):
            return g.device["copy_gbps"], g.device.get("matmul_tflops")
    return None, None


def roofline_chart(grades: list, env: dict | None, path: Path) -> Path | None:
    # log axes: a point at zero or below (an old record's) cannot be drawn
    points = [(g, t) for g in grades for t in g.timings[-1:] if (t.intensity or 0) > 0 and (t.learner_tflops or 0) > 0]
    bandwidth, peak = _ceilings(grades, env)
    if not points or not bandwidth or not peak:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    low = min(min(t.intensity for _, t in points) / 4, 0.05)
    high = max(max(t.intensity for _, t in points) * 4, peak * 1e3 / bandwidth * 4)
    xs = [low * (high / low) ** (i / 200) for i in range(201)]
    ax.plot(
        xs,
        [min(peak, bandwidth * x / 1e3) for x in xs],
        color=COLORS["roof"],
        lw=2,
        label=f"roofline: {bandwidth:.0f} GB/s, {peak:.1f} TFLOP/s (measured)",
    )
    for g, t in points:
        ax.scatter([t.intensity], [t.learner_tflops], s=60, color=COLORS["learner"], zorder=3)
        ax.annotate(
            f"{g.exercise} ({g.lang})",
            (t.intensity, t.learner_tflops),
            textcoords="offset points",
            xytext=(6, 4),
            fontsize=8,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title("Your kernels on the roofline")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def speed_vs_size(grade: Any, path: Path) -> Path | None:
    timings = [t for t in grade.timings if t.learner_rate]
    if not timings:
        return None
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    labels = [t.case for t in timings]
    for who in ("learner", "solution", "torch"):
        values = [getattr(t, f"{who}_rate") for t in timings]
        if any(v for v in values):
            ax.plot(
                labels,
                [v or float("nan") for v in values],
                marker="o",
                color=COLORS[who],
                label="you" if who == "learner" else who,
            )
    ax.set_xlabel("size")
    ax.set_ylabel(timings[0].unit)
    ax.set_title(f"{grade.exercise} ({grade.lang}): speed vs size")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    plt.setp(ax.get_xticklabels(), rotation=15, fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _file_safe(name: str) -> str:
    """A record's names go into file names: nothing in them may leave the reports folder."""
    return re.sub(r"[^\w.-]", "_", name).lstrip(".") or "unnamed"


def render_all(grades: list, env: dict | None, out_dir: Path) -> list[dict[str, str]]:
    """Write every plot the data allows; returns [{title, file}] for the report to link."""
    made = []
    roof = roofline_chart(grades, env, out_dir / "roofline.png")
    if roof:
        made.append({"title": "Roofline", "file": roof.name})
    for g in grades:
        plot = speed_vs_size(g, out_dir / f"speed_{_file_safe(g.exercise)}_{_file_safe(g.lang)}.png")
        if plot:
            made.append({"title": f"{g.exercise} ({g.lang}) speed vs size", "file": plot.name})
    return made


def comparison_chart(comparison: dict, path: Path) -> Path | None:
    """`kcourse compare`: one bar per version at the largest timed size (GB/s or TFLOP/s, else ms), the
    solution's and torch's figures as dashed lines; a version whose numerics failed is drawn grey."""
    key = "rate" if any(r["rate"] for r in comparison["rows"]) else "ms"
    rows = [r for r in comparison["rows"] if r[key]]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7, 1.2 + 0.45 * len(rows)), dpi=110)
    colors = [COLORS["learner"] if r["numerics"] == "passed" else "#999999" for r in rows]
    ax.barh([r["label"] for r in rows], [r[key] for r in rows], color=colors)
    for who in ("solution", "torch"):
        value = next((r[f"{who}_{key}"] for r in rows if r[f"{who}_{key}"]), None)
        if value:
            ax.axvline(value, color=COLORS[who], ls="--", lw=1.5, label=f"{who}: {value:.4g}")
    ax.invert_yaxis()  # the versions top to bottom in the order compared
    ax.set_xlabel((comparison["unit"] or rows[0]["unit"] or "rate") if key == "rate" else "time (ms), lower is better")
    ax.set_title(
        f"{comparison['exercise']} ({comparison['lang']}): versions compared"
        + (f" at {comparison['case']}" if comparison["case"] else ""),
        fontsize=10,
    )
    ax.grid(True, axis="x", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # beside the bars, never over them
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    plt.setp(ax.get_yticklabels(), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


def comparison_file(comparison: dict, out_dir: Path) -> str:
    """The chart's file name next to the report, or "" when nothing was timed (no GPU)."""
    name = f"compare_{_file_safe(comparison['exercise'])}_{_file_safe(comparison['lang'])}.png"
    made = comparison_chart(comparison, out_dir / name)
    return made.name if made else ""


# `kcourse compare attention`: each implementation against sequence length, torch's SDPA dashed.
IMPLEMENTATION_COLORS = ("#d62728", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
ATTENTION_CHARTS = {  # key -> (file, title, y label, y scale)
    "ms": ("attention_time.png", "time per call", "time (ms), lower is better", "log"),
    "tflops": ("attention_tflops.png", "throughput", "TFLOP/s (4·B·H·N²·d / time)", "linear"),
    "extra_bytes": ("attention_memory.png", "peak extra GPU memory", "MB beyond inputs and outputs", "symlog"),
}


def _attention_lines(sweep: dict, key: str) -> list[tuple[str, list, list, list, str, str]]:
    """(label, lengths, values, answers far from SDPA's, color, style) per implementation that has figures."""
    scale = 1e-6 if key == "extra_bytes" else 1.0
    lines = []
    series = [(r["label"], r["points"], False) for r in sweep["implementations"] if r["points"]]
    for index, (label, points, sdpa) in enumerate(series + [("torch SDPA", sweep["sdpa"], True)]):
        drawn = [p for p in points if p.get(key) is not None and not p.get("error")]
        if not drawn:
            continue
        color = COLORS["torch"] if sdpa else IMPLEMENTATION_COLORS[index % len(IMPLEMENTATION_COLORS)]
        lines.append(
            (
                label,
                [p["N"] for p in drawn],
                [p[key] * scale for p in drawn],
                [p.get("agrees") is False for p in drawn],
                color,
                "--" if sdpa else "-",
            )
        )
    return lines


def attention_chart(sweep: dict, key: str, path: Path) -> Path | None:
    lines = _attention_lines(sweep, key)
    if not lines:
        return None
    _, title, ylabel, yscale = ATTENTION_CHARTS[key]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for label, lengths, values, far, color, style in lines:
        ax.plot(lengths, values, marker="o", ls=style, color=color, label=label)
        stray = [(n, v) for n, v, bad in zip(lengths, values, far) if bad]
        if stray:  # an answer far from SDPA's: ringed, so a fast wrong point is not read as fast
            ax.scatter(*zip(*stray), s=160, facecolors="none", edgecolors="black", zorder=4)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sweep["lengths"] or sorted({n for line in lines for n in line[1]}))
    ax.get_xaxis().set_major_formatter(ScalarFormatter())
    if yscale == "symlog":  # zero (a kernel that allocates nothing) stays drawable beside gigabytes
        ax.set_yscale("symlog", linthresh=1.0)
        ax.set_ylim(0, max(max(line[2]) for line in lines) * 3 + 2)
    else:
        ax.set_yscale(yscale)
    ax.set_xlabel("sequence length N")
    ax.set_ylabel(ylabel)
    ax.set_title(f"attention: {title} (B={sweep['B']} H={sweep['H']} d={sweep['d']} {sweep['dtype']})", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


def attention_charts(sweep: dict, out_dir: Path) -> list[dict[str, str]]:
    """The sweep's charts next to the report: [{title, file}] for those with anything to draw."""
    made = []
    for key, (name, title, _, _) in ATTENTION_CHARTS.items():
        chart = attention_chart(sweep, key, out_dir / name)
        if chart:
            made.append({"title": f"attention: {title} against sequence length", "file": chart.name})
    return made


# output_map's categories: right, wrong, never written, NaN/inf
MAP_COLORS = ("#e6e6e6", "#d62728", "#ff9f1c", "#6a0dad")
MAP_LABELS = ("right", "wrong", "never written", "NaN/inf")


def output_map_chart(lines: list[str], title: str, path: Path) -> Path | None:
    """The picture a failing check drew in characters (its details' "map"), as coloured cells."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    from grader.checks.output_map import GLYPHS

    rows = [[GLYPHS.index(c) for c in line.strip() if c in GLYPHS] for line in lines[1:]]
    if not rows or not rows[0] or len({len(r) for r in rows}) != 1:
        return None
    fig, ax = plt.subplots(figsize=(min(10.0, 1.5 + 0.18 * len(rows[0])), 1.2 + 0.3 * len(rows)))
    ax.imshow(
        rows, cmap=ListedColormap(MAP_COLORS), vmin=0, vmax=len(MAP_COLORS) - 1, aspect="auto", interpolation="nearest"
    )
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=9)
    ax.legend(
        handles=[Patch(color=c, label=label) for c, label in zip(MAP_COLORS, MAP_LABELS)],
        fontsize=7,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        frameon=False,
    )
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def failure_maps(grades: list, out_dir: Path) -> list[dict[str, Any]]:
    """[{title, file, lines}] for each failed grade whose failing check drew a map: the report shows both."""
    made = []
    for g in grades:
        check = _mapped_failure(g) if g.status == "failed" else None
        if check is None:
            continue
        title = f"{g.exercise} ({g.lang}): {(str(_field(check, 'message') or '').splitlines() or [''])[0][:100]}"
        lines = [str(line) for line in _field(check, "details")["map"]]
        path = output_map_chart(lines, title, out_dir / f"map_{_file_safe(g.exercise)}_{_file_safe(g.lang)}.png")
        made.append({"title": title, "file": path.name if path else None, "lines": lines})
    return made


def _field(check: Any, name: str) -> Any:
    return check.get(name) if isinstance(check, dict) else getattr(check, name, None)


def _mapped_failure(grade: Any) -> Any:
    """The grade's failed check that carries a map (a record's checks may be dicts or Checks)."""
    for check in grade.checks or []:
        details = _field(check, "details") or {}
        if _field(check, "status") == "failed" and isinstance(details, dict) and isinstance(details.get("map"), list):
            return check
    return None

"""Figures a reader would rather look at than read (PNG, matplotlib's headless Agg backend).

Each function takes plain data and a path and writes one PNG; none of them computes a result
the tables do not already hold, so a figure can never disagree with its report.
"""

from __future__ import annotations

import math
from pathlib import Path

from fleet.core.profile import Profile, frontier
from fleet.method.selection import fits


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def operating_points(
    profile: Profile,
    budget_w: float | None,
    path: Path,
    marks: dict[str, tuple[int, float]] | None = None,
    title: str = "",
) -> Path:
    """Fig. 1 / 9 / 10: every profiled (b, f) as peak power vs time per sample.

    Feasible points are filled, the budget is a horizontal line, the frontier (fastest feasible
    point per batch size: what our method considers) is ringed, and each method's choice in
    ``marks`` is labelled.
    """
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9.5, 4.8), dpi=110)
    budget = math.inf if budget_w is None else budget_w
    sizes = profile.batch_sizes
    cmap = plt.get_cmap("viridis", max(len(sizes), 2))
    front = frontier(profile, budget_w) if profile.has_power or budget_w is None else {}
    for k, b in enumerate(sizes):
        pts = [p for p in profile.points if p.batch_size == b]
        xs = [p.time_per_sample_s * 1e3 for p in pts]
        ys = [p.peak_power_w for p in pts]
        filled = [fits(p, budget) for p in pts]
        ax.scatter(
            [x for x, f in zip(xs, filled, strict=True) if f],
            [y for y, f in zip(ys, filled, strict=True) if f],
            color=cmap(k),
            s=18,
            label=f"b={b}",
        )
        ax.scatter(
            [x for x, f in zip(xs, filled, strict=True) if not f],
            [y for y, f in zip(ys, filled, strict=True) if not f],
            facecolors="none",
            edgecolors=cmap(k),
            s=18,
            alpha=0.6,
        )
    if front:
        ax.scatter(
            [p.time_per_sample_s * 1e3 for p in front.values()],
            [p.peak_power_w for p in front.values()],
            facecolors="none",
            edgecolors="black",
            s=90,
            linewidths=1.2,
            label="frontier (candidates)",
        )
    if budget_w is not None:
        ax.axhline(
            budget_w, color="red", linestyle="--", linewidth=1, label=f"budget {budget_w:g} W"
        )
    # Each method's pick gets its own marker and a legend entry instead of a text label beside
    # the point: picks cluster on the frontier, and labels there overlap each other and the data.
    shapes = ("s", "^", "*", "D", "P", "X")
    for k, (name, (b, f)) in enumerate((marks or {}).items()):
        p = profile.point(b, f)
        if p is None:
            continue
        ax.scatter(
            [p.time_per_sample_s * 1e3],
            [p.peak_power_w],
            marker=shapes[k % len(shapes)],
            s=70 - 10 * k,
            facecolors="none" if k % 2 else "red",
            edgecolors="red",
            linewidths=1.2,
            zorder=5,
            label=f"{name}: b={b}, {f:g} MHz",
        )
    ax.set_xscale("log")
    ax.set_xlabel("time per sample (ms, log)")
    ax.set_ylabel("peak power (W)")
    ax.set_title(title or Path(profile.source).name, fontsize=10)
    # outside the axes: the top right is where the infeasible points are
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def method_bars(
    groups: list[str],
    series: dict[str, list[float | None]],
    errors: dict[str, list[float | None]] | None,
    ylabel: str,
    path: Path,
    title: str = "",
) -> Path:
    """Fig. 4 style: one bar per method within each group (e.g. budget), with std error bars."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(7.5, 1.3 * len(groups) + 4.5), 4.2), dpi=110)
    n = max(len(series), 1)
    width = 0.8 / n
    for k, (name, values) in enumerate(series.items()):
        xs = [g + (k - (n - 1) / 2) * width for g in range(len(groups))]
        ys = [v if v is not None and math.isfinite(v) else 0.0 for v in values]
        err = None
        if errors and name in errors:
            err = [e if e is not None and math.isfinite(e) else 0.0 for e in errors[name]]
        ax.bar(xs, ys, width=width, yerr=err, capsize=2, label=name)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    # beside the axes: inside, it covers the tallest bars and their error bars
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def sensitivity_matrices(
    datasets: list[str], matrices: dict[str, list[list[float | None]]], path: Path, title: str
) -> Path:
    """Fig. 5 / 6: rows = proxy, columns = target, cell = % extra time over the target's own r."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(matrices), figsize=(3.6 * len(matrices), 3.4), dpi=110)
    if len(matrices) == 1:
        axes = [axes]
    for ax, (label, mat) in zip(axes, matrices.items(), strict=True):
        vals = [[v if v is not None else float("nan") for v in row] for row in mat]
        ax.imshow(vals, cmap="Reds", vmin=0, vmax=max(10.0, max(max(r) for r in vals)))
        for i, row in enumerate(mat):
            for j, v in enumerate(row):
                ax.text(
                    j, i, "-" if v is None else f"{v:.1f}", ha="center", va="center", fontsize=8
                )
        ax.set_xticks(range(len(datasets)))
        ax.set_xticklabels(datasets, rotation=30, fontsize=7)
        ax.set_yticks(range(len(datasets)))
        ax.set_yticklabels(datasets, fontsize=7)
        ax.set_title("budget " + (label if label == "none" else f"{label} W"), fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path

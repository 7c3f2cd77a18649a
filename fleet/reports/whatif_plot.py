"""The what-if figure: fleet round time against fleet energy, one point per budget step.

Plain data in, one PNG out (matplotlib's headless Agg backend), like ``fleet.reports.plots``; the
points are the rows of the what-if table, so the figure cannot disagree with it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from fleet.method.profile_io import atomic_write
from fleet.planning.whatif import WhatIfStep


def plot_front(
    steps: Sequence[WhatIfStep],
    front: Sequence[WhatIfStep],
    path: str | Path,
    title: str = "",
    scale: bool = False,
    series: dict[str, Sequence[WhatIfStep]] | None = None,
) -> Path:
    """Every step as a labelled point (time, kJ), the non-dominated ones joined as the front.

    ``series`` adds other objectives' sweeps (name -> steps) as extra lines for comparison.
    """
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=110)
    unit = "×" if scale else " W"
    pts = [s for s in steps if s.round_time_s is not None]
    ax.scatter([_secs(s) for s in pts], [s.energy_j / 1000 for s in pts], s=18, zorder=3)
    for s in pts:
        label = f"{s.value:g}{unit}" + (f" ({s.infeasible} inf.)" if s.infeasible else "")
        ax.annotate(
            label,
            (s.round_time_s, s.energy_j / 1000),
            fontsize=7,
            xytext=(3, 3),
            textcoords="offset points",
        )
    ax.plot(
        [_secs(s) for s in front],
        [s.energy_j / 1000 for s in front],
        "-",
        label=f"front ({steps[0].objective if steps else ''})",
        zorder=2,
    )
    for name, other in (series or {}).items():
        o = [s for s in other if s.round_time_s is not None]
        ax.plot(
            [_secs(s) for s in o],
            [s.energy_j / 1000 for s in o],
            "--",
            marker=".",
            label=name,
        )
    ax.set_xlabel("fleet round time (s, slowest device)")
    ax.set_ylabel("fleet energy (kJ)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(str(path), lambda fh: fh.write(buf.getvalue()))
    return path


def _secs(step: WhatIfStep) -> float:
    """A step's round time; NaN (a gap in the line, as None is to matplotlib) without one."""
    return math.nan if step.round_time_s is None else step.round_time_s

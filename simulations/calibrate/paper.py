"""The paper's Tables 2-4 as the fit sees them: the transcribed cells and the setup behind them.

``simulations/paper_cells.csv`` holds every time cell (B1, B2, ours, fastest); this module reads
it and names the budgets, the baselines' caps, the methods, the datasets and the boards each
model ran on. Every other part of the calibration reads these, so they sit below it alone.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from fleet.method.budget import parse_budget
from simulations.devicemodel.paper_checks import BASELINE_CAPS_MHZ, TX2NX_BASELINE_CAPS_MHZ

CELLS_PATH = Path(__file__).resolve().parents[1] / "paper_cells.csv"

BUDGETS: tuple[float | None, ...] = (4.5, 7.0, None)
#: Baselines' caps (paper §5.1 for the Nano; inferred from Table 4's B1 column for the TX2 NX).
CAPS_MHZ: dict[str, dict[float | None, float]] = {
    "nano": BASELINE_CAPS_MHZ,
    "tx2nx": TX2NX_BASELINE_CAPS_MHZ,
}
METHODS = ("b1", "b2", "ours", "oracle")
#: The proxy and the targets of each model (paper §5.1), in the order parameters are packed.
DATASETS = {
    "resnet18": ("cifar10-proxy", "svhn", "cinic"),
    "mobilenetv2": ("cifar10-proxy", "svhn", "cinic"),
    "transformer": ("shakespeare-proxy", "austen", "dickens"),
}
BOARDS_OF = {"resnet18": ("nano", "tx2nx"), "mobilenetv2": ("nano",), "transformer": ("nano",)}


@dataclass(frozen=True)
class Cell:
    table: int
    model: str
    board: str
    dataset: str
    budget_w: float | None
    method: str
    time_s: float
    std_s: float

    @property
    def key(self) -> tuple[str, str, str, float | None, str]:
        return (self.model, self.board, self.dataset, self.budget_w, self.method)


def load_cells(path: Path = CELLS_PATH) -> list[Cell]:
    """The transcribed table cells (``#`` lines are the citation)."""
    with open(path, newline="") as fh:
        lines = [ln for ln in fh if not ln.startswith("#")]
    out = []
    for r in csv.DictReader(lines):
        budget = parse_budget(r["budget_w"], "budget_w")
        out.append(
            Cell(
                int(r["table"]),
                r["model"],
                r["board"],
                r["dataset"],
                budget,
                r["method"],
                float(r["time_s"]),
                float(r["std_s"]),
            )
        )
    return out

"""The reference audited against the paper (issue 21): before/after, rerunnable.

    python benchmarks/paper_audit.py                      # the committed report's results
    python benchmarks/paper_audit.py --before 109ebd3     # beside main before issue 21
    python benchmarks/paper_audit.py --results R.json     # any experiment's results

Prints the audit Markdown of :mod:`simulations.calibrate.audit_report`: cells counted, the
faulty Table 3 cell with its ratios, the copied stds, and every goal (B1/ours and B2/ours ratio
errors with the leave-one-out beside them, ours over the fastest per cell, Fig. 5/6) for the
results given and, with ``--before REF``, for ``docs/paper-report/results.json`` as committed at
that git revision. Exit 0 when every goal is met, 1 when one is missed, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulations.calibrate.audit import fitted_cells  # noqa: E402
from simulations.calibrate.audit_report import audit_markdown  # noqa: E402
from simulations.calibrate.calibration_file import committed_loo  # noqa: E402
from simulations.calibrate.goals import measure  # noqa: E402
from simulations.calibrate.paper import load_cells  # noqa: E402

RESULTS = ROOT / "docs" / "paper-report" / "results.json"


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"paper_audit: {path}: {exc}") from None


def _at_revision(ref: str) -> dict:
    rel = RESULTS.relative_to(ROOT).as_posix()
    got = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{ref}:{rel}"], capture_output=True, text=True
    )
    if got.returncode != 0:
        print(f"paper_audit: --before {ref}: {got.stderr.strip()}", file=sys.stderr)
        raise SystemExit(2)
    return json.loads(got.stdout)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--results", type=Path, default=RESULTS, help="an experiment's results.json")
    p.add_argument("--before", help="git revision whose committed results.json to show beside")
    args = p.parse_args(argv)
    if not args.results.exists():
        print(f"paper_audit: --results {args.results}: not found", file=sys.stderr)
        return 2
    results = _read(args.results)
    before = _at_revision(args.before) if args.before else None
    cells = load_cells()
    print(audit_markdown(cells, results, before, committed_loo()))
    m = measure(results, fitted_cells(cells))
    return 0 if m["ratio_ok"] and m["gap_ok"] and m["sensitivity_ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

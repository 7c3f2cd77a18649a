"""Fuzz every input format powerfleet reads and count how each mutated input is handled.

Why a harness and not only unit tests: the hardening issue (docs/architecture.md, "inputs") is
about the inputs nobody thought of. Unit tests pin the classes of bad input we know; this script
throws thousands of mutated files and lines (truncation, wrong types, NaN/inf/huge/negative
values, duplicates, BOM, CRLF, quoted newlines, binary, deep nesting, very long lines) at the
same loaders a user reaches and sorts every outcome into:

- ``clean``: the project's own error type with a one-line message (what the CLI prints, exit 2);
- ``accepted``: the loader returned and the result passed the physical checks below;
- ``impossible``: the loader returned something physically impossible (mean power above peak,
  0 W, 0 MHz, sub-microsecond steps, non-finite numbers, a corrupted tensor file whose content
  changed, a checkpoint whose counters disagree with its own curve, a request split in two...);
- ``traceback``: any other exception (a bare ``ValueError``, ``KeyError``, ``RecursionError``...),
  or the agent dying;
- ``hang``: over the per-input time limit, or over the memory cap.

In-process for volume, plus a sample through the CLI (``powerfleet select``/``inspect``: exit 2 and
one stderr line is clean) and a live ``python -m fleet.agent --backend replay`` fed hostile lines,
each followed by a ``hello`` that must still be answered. CI does not run this (it is slow);
``python benchmarks/fuzz.py --n 10000`` is the acceptance run, ``--n 300`` a quick look.

This file is the driver (flags, the run over every family, the report). The outcome classes
and the run loop are ``fuzz_harness.py``, the generic mutators ``fuzz_mutators.py``, and each
target family its own module: ``fuzz_csv.py`` (profile and efficiency CSV, and the CLI
sample), ``fuzz_fleet.py``, ``fuzz_budget.py``, ``fuzz_tensors.py``, ``fuzz_agent.py``.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.fuzz_agent import agent_format, live_agent_sample  # noqa: E402
from benchmarks.fuzz_budget import budget_format  # noqa: E402
from benchmarks.fuzz_csv import cli_sample, csv_formats  # noqa: E402
from benchmarks.fuzz_fleet import fleet_format  # noqa: E402
from benchmarks.fuzz_harness import (  # noqa: E402
    OUTCOMES,
    fuzz_format,
    on_alarm,
    print_entry,
    set_memory_cap,
)
from benchmarks.fuzz_tensors import tensor_format  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="inputs per format (goal: 10000)")
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--limit-s", type=float, default=10.0, help="per-input time limit")
    ap.add_argument("--cli", type=int, default=20, help="CLI subprocess sample per CSV format")
    ap.add_argument("--agent", type=int, default=100, help="hostile lines into a live agent")
    ap.add_argument("--formats", default="", help="comma list of format names to run (substr)")
    ap.add_argument("--examples", type=int, default=3, help="example messages per outcome")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    import logging
    import warnings

    import torch

    logging.disable(logging.CRITICAL)  # the agent logs failed commands; the counts say enough
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    signal.signal(signal.SIGALRM, on_alarm)
    tmp = tempfile.mkdtemp(prefix="powerfleet-fuzz-")
    formats = [
        *csv_formats(tmp),
        fleet_format(tmp),
        agent_format(tmp),
        tensor_format(tmp),
        budget_format(tmp),
    ]
    wanted = [w.strip().lower() for w in args.formats.split(",") if w.strip()]
    set_memory_cap(6.0)
    report = {}
    try:
        for fmt in formats:
            if wanted and not any(w in fmt.name.lower() for w in wanted):
                continue
            if not fmt.available:
                report[fmt.name] = {"skipped": fmt.why_skipped}
                print(f"{fmt.name:15s} skipped: {fmt.why_skipped}", flush=True)
                continue
            counts, samples, kept, secs = fuzz_format(
                fmt, args.n, args.seed, args.limit_s, args.examples
            )
            entry = {"n": args.n, "seconds": round(secs, 1), **{o: counts[o] for o in OUTCOMES}}
            entry["examples"] = {o: s for o, s in samples.items() if s}
            if fmt.name in ("profile CSV", "efficiency CSV") and args.cli:
                rng = random.Random(args.seed)
                pool = kept["clean"] + kept["impossible"] + kept["traceback"] + kept["accepted"]
                pick = rng.sample(pool, min(args.cli, len(pool)))
                entry["cli"] = dict(cli_sample(fmt.name, pick, tmp, args.limit_s))
            if fmt.name == "agent lines" and args.agent:
                entry["live_agent"] = dict(live_agent_sample(args.agent, args.seed, args.limit_s))
            report[fmt.name] = entry
            print_entry(fmt.name, entry)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(report, indent=1))
    bad = sum(e.get(k, 0) for e in report.values() for k in ("impossible", "traceback", "hang"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

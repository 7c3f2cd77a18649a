"""`powerfleet data prepare|list`: fetch the offline corpora into the cache and show what is there.

``prepare`` is idempotent and atomic (see ``fleet.data.prepare``): re-running it checks checksums
and does nothing else. The cache folder is ``--data-dir``, else ``$POWERFLEET_DATA``, else
``~/.cache/powerfleet/data``; the device readers (``fleet.agent.data.datasets.load_dataset``) read
the same layout.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from fleet.agent.data.dataerror import DatasetError
from fleet.agent.data.datasets import KNOWN_DATASETS
from fleet.cli import checks
from fleet.cli.common import console, emit_json
from fleet.common.errors import InputError
from fleet.data.cache import resolve_data_dir
from fleet.data.canonical import offline
from fleet.data.prepare import list_datasets, prepare


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "data", help="prepare the offline datasets (download once, cache) and list them"
    )
    data_sub = p.add_subparsers(dest="data_command", metavar="ACTION")
    data_sub.required = True

    prep = data_sub.add_parser(
        "prepare",
        help="fetch and convert datasets into the cache (default: all)",
        description=f"Datasets: {', '.join(KNOWN_DATASETS)}.",
    )
    prep.add_argument("names", nargs="*", metavar="DATASET", help="datasets (default: all)")
    prep.add_argument(
        "--data-dir",
        type=checks.output_dir("cache folder"),
        help="cache folder (default: $POWERFLEET_DATA or ~/.cache/powerfleet/data)",
    )
    prep.add_argument("--force", action="store_true", help="rebuild even if already prepared")
    prep.add_argument("--json", action="store_true", help="one JSON object on stdout")
    prep.set_defaults(func=run_prepare)

    lst = data_sub.add_parser("list", help="show which datasets are prepared, sizes and counts")
    lst.add_argument(
        "--data-dir",
        type=checks.output_dir("cache folder"),
        help="cache folder (default: $POWERFLEET_DATA or ~/.cache/powerfleet/data)",
    )
    lst.add_argument("--json", action="store_true", help="one JSON object on stdout")
    lst.set_defaults(func=run_list)


def run_prepare(args: argparse.Namespace) -> int:
    names = args.names or list(KNOWN_DATASETS)
    unknown = [n for n in names if n not in KNOWN_DATASETS]
    if unknown:
        raise InputError(f"unknown dataset {unknown[0]!r}; known: {', '.join(KNOWN_DATASETS)}")
    root = resolve_data_dir(args.data_dir)
    progress_console = Console(stderr=True)
    started = time.monotonic()
    try:
        with Progress(
            TextColumn("[bold]{task.fields[name]:<14}[/]"),
            BarColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=progress_console,
            disable=not progress_console.is_terminal,
        ) as bar:
            tasks = {n: bar.add_task("waiting", total=1.0, name=n) for n in dict.fromkeys(names)}

            def on_progress(name: str, message: str, fraction: float) -> None:
                bar.update(tasks[name], completed=fraction, description=message)

            prepare(names, root, force=args.force, progress=on_progress)
    except DatasetError as exc:
        raise InputError(str(exc)) from None
    elapsed = time.monotonic() - started
    rows = [r for r in list_datasets(root) if r["name"] in names]
    if args.json:
        emit_json({"data_dir": str(root), "seconds": round(elapsed, 2), "datasets": rows})
        return 0
    _print_table(f"Prepared in {root} ({elapsed:.1f} s)", rows)
    return 0


def run_list(args: argparse.Namespace) -> int:
    offline()  # a value that is no switch word is said by every data command, not only prepare
    root = resolve_data_dir(args.data_dir)
    rows = list_datasets(root)
    if args.json:
        emit_json({"data_dir": str(root), "datasets": rows})
        return 0
    _print_table(f"Datasets in {root}", rows)
    missing = [r["name"] for r in rows if not r["prepared"]]
    if missing:
        where = f" --data-dir {args.data_dir}" if args.data_dir else ""
        console.print(f"prepare the rest with: powerfleet data prepare {' '.join(missing)}{where}")
    return 0


def _print_table(title: str, rows: list[dict[str, Any]]) -> None:
    t = Table(title=title, title_justify="left")
    for col in ("dataset", "kind", "status", "MB", "contents", "source"):
        t.add_column(col, justify="right" if col == "MB" else "left")
    for r in rows:
        ok = r["prepared"]
        t.add_row(
            r["name"],
            r["kind"],
            "prepared" if ok else "[yellow]missing[/]",
            f"{r['bytes'] / 1e6:.1f}" if ok else "-",
            _contents(r) if ok else "-",
            _source(r.get("source") or {}) if ok else "-",
        )
    console.print(t)


def _contents(row: dict[str, Any]) -> str:
    c = row.get("counts") or {}
    if row["kind"] == "text":
        return (
            f"{c.get('documents', '?')} doc(s), {c.get('characters', 0):,} chars, "
            f"vocab {c.get('vocab_size', '?')}/{c.get('vocab_capacity', '?')}"
        )
    shape = "x".join(str(v) for v in c.get("shape", []))
    if "train" in c:
        return f"{c['train']:,} train + {c['test']:,} test, {shape}, {c.get('classes')} classes"
    return f"{c.get('samples', 0):,} samples, {shape}, {c.get('classes')} classes"


def _source(src: dict[str, Any]) -> str:
    if src.get("route") == "canonical":
        return str(src.get("url", "canonical"))
    return f"{src.get('route', '?')}: {src.get('package', '?')} {src.get('version', '')}".strip()

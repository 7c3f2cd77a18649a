"""`powerfleet profiles [STORE]`: list the coordinator's profile store (issue 11).

One line per stored profile: device, board type, workload (model @ input shape), where the
profile came from (measured, predicted, refreshed, sibling), how many points were probed, when,
how many rows, and the file. The store is ``STORE``, else the fleet's
``[run] profile_store`` (``--fleet F``), else ``runs/profile-store`` under the current
directory. The store itself is ``fleet.trust.store``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fleet.cli.common import console, emit_json, note, table
from fleet.cli.names import deprecated
from fleet.common.errors import InputError
from fleet.trust.store import default_store, list_store, store_from_fleet


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profiles", help="list the coordinator's profile store")
    p.add_argument(
        "store",
        metavar="STORE",
        nargs="?",
        help="store directory (default: the fleet's, else runs/profile-store)",
    )
    deprecated(p, "--store", "store")
    p.add_argument("--fleet", help="fleet TOML whose [run] profile_store names the store")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=run)


def resolve(args: argparse.Namespace) -> Path:
    if args.store:
        return Path(args.store)
    if args.fleet:
        found = store_from_fleet(args.fleet)
        if found is not None:
            return found
    return default_store("runs")


def run(args: argparse.Namespace) -> int:
    store = resolve(args)
    if store.exists() and not store.is_dir():
        raise InputError(f"{store}: not a directory (a profile store is a folder)")
    entries = list_store(store)
    if not store.exists():  # a coordinator's first round: said, not an error, and no empty table
        note("profiles", f"store {store} does not exist yet (no profile stored)")
        if not args.json:
            return 0
    if args.json:
        emit_json({"store": str(store), "profiles": [e.summary() for e in entries]})
        return 0
    rows = []
    for e in entries:
        s = e.summary()
        rows.append(
            [
                s["device"],
                s["type"],
                e.workload.label,
                s["source"],
                "-" if s["probes"] is None else s["probes"],
                s["date"] or "-",
                s["rows"],
                s["path"],
            ]
        )
    console.print(
        table(
            f"Profile store {store}",
            ["device", "type", "workload", "source", "probes", "date", "rows", "file"],
            rows,
        )
    )
    return 0

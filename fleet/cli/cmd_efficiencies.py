"""`powerfleet efficiencies STORE`: what the fleet learnt of its samples-to-target (issue 22).

Two tables: every observation (round, device, the batch size it speaks of, samples-to-target,
the sd of its log, reached or fitted, the efficiency the device had been shipped) and, per
device, the efficiency it would be shipped next round (the store's posterior, with the
observations it was learnt from). ``STORE`` is the efficiency store directory (a run's
``efficiency-store``, or the fleet's ``[run] efficiency_store``); ``--efficiency`` is the prior
(the fleet's ``[run] efficiency``) the posterior starts from, needed for the second table.
The store itself is ``fleet.trust.efficiency_store``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fleet.cli import checks
from fleet.cli.common import console, emit_json, note, table
from fleet.common.errors import InputError
from fleet.core.efficiency import load_efficiency
from fleet.trust.efficiency_store import EfficiencyStore, posteriors


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("efficiencies", help="what the fleet learnt of its samples-to-target")
    p.add_argument(
        "store", metavar="STORE", help="efficiency store directory (a run's efficiency-store)"
    )
    p.add_argument(
        "--efficiency",
        type=checks.input_file("efficiency CSV"),
        help="the fleet's shipped efficiency CSV (the prior)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    store = EfficiencyStore(args.store)
    if not Path(args.store).is_dir():
        raise InputError(
            f"{args.store}: no such efficiency store (a run directory's efficiency-store)"
        )
    obs = store.observations()
    if not obs:
        note("efficiencies", f"store {args.store} holds no observation yet")
    nxt = {}
    if args.efficiency and obs:
        prior = load_efficiency(args.efficiency)
        devices = sorted({o.device for o in obs})
        nxt = posteriors(prior, obs, devices)
    if args.json:
        emit_json(
            {
                "store": str(args.store),
                "observations": [o.__dict__ for o in obs],
                "next": {
                    d: {"samples_to_accuracy": e.samples, "std": e.std, **e.metadata}
                    for d, e in nxt.items()
                },
            }
        )
        return 0
    console.print(
        table(
            f"Efficiency store {args.store}: observations",
            ["round", "device", "batch", "samples to target", "sd(log)", "how", "shipped"],
            [
                [
                    o.round,
                    o.device,
                    o.batch_size,
                    f"{o.samples_to_target:,.0f}",
                    f"{o.log_sd:.3f}",
                    "reached" if o.reached else "fitted",
                    Path(o.shipped).name or "-",
                ]
                for o in obs
            ],  # fmt: skip
        )
    )
    if nxt:
        bs = sorted({b for e in nxt.values() for b in e.batch_sizes})
        console.print(
            table(
                "Next round's efficiency per device (samples to target)",
                ["device", *[f"b={b}" for b in bs], "learnt from"],
                [
                    [d, *[f"{e.samples[b]:,.0f}" for b in bs], e.metadata.get("learned_from", "")]
                    for d, e in nxt.items()
                ],
            )
        )
    return 0

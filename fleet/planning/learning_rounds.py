"""Rounds of a fleet that learns its efficiency: round r ships what rounds 1..r-1 taught.

Why: within a round each device corrects the proxy's guess from its own curve; across rounds
the coordinator keeps that evidence (``fleet.trust.efficiency_store``) and ships every device a
corrected vector next round, so the plan made before anyone trains (the deadline, the first
choice) is made on the fleet's data, not the proxy's. This is the direct engine's loop over
rounds; the Flower coordinator does the same between its rounds (``strategies/server_app.py``).
"""

from __future__ import annotations

from pathlib import Path

from fleet.config.fleetfile import Fleet
from fleet.planning.whatif import FleetRound, Progress, simulate_fleet
from fleet.rounds.virtual_clock import cached_efficiency
from fleet.trust.efficiency_store import EfficiencyStore


def simulate_rounds(
    fleet: Fleet,
    objective: str | None,
    rounds: int,
    store_dir: str | Path,
    segment_s: float | None = None,
    progress: Progress | None = None,
) -> list[FleetRound]:
    """``rounds`` rounds on the direct engine, each shipped what the store learnt before it
    (``progress`` is told of every device in the last round)."""
    store = EfficiencyStore(store_dir)
    prior = cached_efficiency(fleet.run.efficiency)
    names = [d.name for d in fleet.devices]
    out = []
    for r in range(1, rounds + 1):
        own = store.shipments(prior, names, r)
        tell = progress if r == rounds else None
        got = simulate_fleet(fleet, objective, segment_s=segment_s, own=own or None, progress=tell)
        shipped = {n: (own[n].source if n in own else prior.source) for n in names}
        store.record(r, got.rows, shipped)
        out.append(got)
    return out

"""The coordinator's side of the efficiency store: keep what devices learnt, ship it back.

Every reply row may carry what its device learnt of its samples-to-target (``learned_*``
columns, ``fleet/agent/learning/efficiency_learner.py``). After each round the keeper records them
in the
store (``fleet.trust.efficiency_store``: one line per device and round, with the efficiency it
had been shipped); before each later round it ships every device its own posterior in the
instruction (``records.EFFICIENCIES``), which the device trains and plans with instead of the
proxy's vector. A fleet whose devices learn nothing (``learn_efficiency = "none"``) records
nothing and ships the proxy's vector every round, as before.
"""

from __future__ import annotations

from pathlib import Path

from flwr.common import log

from clients import records
from clients.efficiency_wire import encode_efficiencies
from fleet.config.fleetfile import Fleet
from fleet.core.efficiency import Efficiency
from fleet.trust.efficiency_store import EfficiencyStore, store_path


class EfficiencyKeeper:
    """The store of one fleet run (``[run] efficiency_store``, default in the run directory)."""

    def __init__(self, fleet: Fleet, shipped: Efficiency, run_dir: str | Path) -> None:
        self.store = EfficiencyStore(store_path(fleet.run, str(fleet.path), run_dir))
        self.prior = shipped
        self.names = [d.name for d in fleet.devices]
        self.sent: dict[int, dict[str, Efficiency]] = {}

    def round_config(self, server_round: int) -> dict[str, str]:
        """This round's instruction key: each device's learnt efficiency (none in round 1)."""
        own = self.store.shipments(self.prior, self.names, server_round)
        self.sent[server_round] = own
        return {records.EFFICIENCIES: encode_efficiencies(own)} if own else {}

    def absorb(self, server_round: int, rows: list[dict[str, object]]) -> None:
        """Record a closed round's evidence (a round recorded again replaces its own)."""
        own = self.sent.get(server_round, {})
        shipped = {n: (own[n].source if n in own else self.prior.source) for n in self.names}
        got = self.store.record(server_round, rows, shipped)
        if got:
            log(
                20,
                "powerfleet: %d device(s) taught the efficiency store %s",
                len(got),
                self.store.root,
            )

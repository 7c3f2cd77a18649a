"""The coordinator's side of the profile store: keep what boards return, ship it back.

A hardware device met for the first time has no profile (its fleet entry says
``client = "hardware"`` and names none, or a file that does not exist yet). It profiles on first
contact (predict mode) and returns the CSV with its reply (``records.attach_profile``); the
coordinator stores it here (``fleet.trust.store``: one file per device and workload, with
provenance) and ships it back in the next round's instruction (``TrainInstruction.profiles``),
so the board never profiles twice. A board of a type the store already knows starts from a
sibling's profile (every row unverified: the device round probes its choice before training).
A profile a board corrected (verify-before-trust, coverage fill, drift refresh) comes back the
same way and replaces the stored one. See docs/architecture.md (profile lifecycle).

Only devices without a usable profile file take part: a simulated fleet of thousands of
devices sharing a reference profile never touches the store.
"""

from __future__ import annotations

import json
from pathlib import Path

from flwr.app import ConfigRecord, Message, RecordDict

from clients import content as rc
from clients import records
from fleet.common.errors import InputError
from fleet.config.fleetfile import Fleet
from fleet.trust.store import Workload, default_store, put_from_device, starting_profile


def workload_of(fleet: Fleet) -> Workload:
    """The store key of this run's profiles: the model and ``[run] input_shape`` (or default)."""
    return Workload.of(fleet.run.model, fleet.run.input_shape or "default")


class ProfileKeeper:
    """The store for one fleet run; ``store`` defaults to ``<state_dir>/profile-store``."""

    def __init__(self, fleet: Fleet, store: str | Path | None, state_dir: str | Path) -> None:
        self.fleet = fleet
        self.store = Path(store) if store else default_store(state_dir)
        self.workload = workload_of(fleet)
        self.types = {
            d.name: d.device_type
            for d in fleet.devices
            if not d.profile or not Path(d.profile).is_file()
        }
        self.stored: list[str] = []  # devices whose profile was stored this run, in order
        self.errors: list[str] = []  # replies whose profile could not be stored, and why

    def shipment(self) -> dict[str, dict[str, str]]:
        """{device: {"origin", "csv"}} for the boards the store can start (stored or sibling)."""
        out: dict[str, dict[str, str]] = {}
        for name, dtype in self.types.items():
            origin, found = starting_profile(self.store, name, dtype, self.workload)
            if found is not None:
                out[name] = {"origin": origin, "csv": found.path.read_text()}
        return out

    def round_config(self, server_round: int) -> dict[str, str]:
        """What the strategy adds to this round's instruction (the ``profiles`` key)."""
        return {records.PROFILES: json.dumps(self.shipment())} if self.types else {}

    def absorb(self, msg: Message) -> str | None:
        """Store the profile a reply carries (new or changed on the board); returns its device.

        A reply from a device the fleet does not list is ignored; a profile that does not
        validate is left out (the row still reports the round) and the reason kept in
        ``self.errors``.
        """
        if msg.has_error():
            return None
        return self.absorb_content(msg.content)

    def absorb_content(self, content: RecordDict) -> str | None:
        """:meth:`absorb` on a reply's content."""
        try:
            report = rc.need(content, records.REPORT, ConfigRecord)
        except KeyError:
            return None
        got = records.reply_profile(report)
        device = str(report.get("device") or "")
        if got is None or device not in self.types:
            return None
        text, info = got
        prov = {k: info[k] for k in ("l4t", "serial") if isinstance(info.get(k), str) and info[k]}
        probes = info.get("probes")
        if isinstance(probes, int) and info.get("origin") == "profiled":
            prov["probes"] = probes
        try:
            put_from_device(self.store, device, self.types[device], self.workload, text, **prov)
        except InputError as exc:
            self.errors.append(f"{device}: {exc}")
            return None
        self.stored.append(device)
        return device

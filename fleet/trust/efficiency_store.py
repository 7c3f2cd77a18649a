"""The coordinator's efficiency store: what every device learnt of its samples-to-target, kept
with its provenance, and the efficiency each device is shipped next round.

Why: the proxy's vector is a guess about data the coordinator never sees. Every device that
trains reports what it learnt (``learned_batch_size``, ``learned_samples``, ``learned_log_sd``:
its learning curve's estimate, exact once it met the target; ``fleet/agent/efficiency_learner``).
Kept across rounds, that evidence corrects the guess for the whole fleet (the data is harder than
the proxy for everyone) and for each device (non-IID: its data is harder than the others').

The model, in ``log N``: a device's curve is the proxy's, plus a fleet-wide deviation ``f`` (the
proxy's kernel ``PROXY_TRUST``: offset, slope, smooth and own parts over ``log2 b``), plus the
device's own deviation ``g_d`` (``DEVICE_TRUST``, narrower: devices of one fleet differ less
from each other than from the proxy). ``f``'s posterior is kept in information form (a sum over
every observation), so the fleet level a device is shipped leaves its own evidence out (no
evidence counted twice) at the cost of one subtraction; its own evidence then conditions
``g_d``. What a device is shipped is the posterior median, with its posterior sd as the
``std`` column (relative spread times the count) and ``source=learned``, which the device's
learner reads as a prior of ``LEARNED_TRUST`` plus that spread.

Layout (``[run] efficiency_store``, default ``<run dir>/efficiency-store``)::

    STORE/observations.jsonl     one line per device and round: round, device, batch_size,
                                 samples_to_target, log_sd, reached, at_utc, shipped (source)
    STORE/shipped/round-NNN.json what each device was shipped for round NNN, with the
                                 observations (round, device) it was learnt from

Appends and writes are atomic per file (an interrupted coordinator leaves whole lines).
"""

from __future__ import annotations

import datetime
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np

from fleet.agent.learning.efficiency_belief import PROXY_TRUST, PriorTrust, prior_cov
from fleet.common.errors import InputError
from fleet.core.efficiency import Efficiency
from fleet.method.profile_io import atomic_write_text

DEFAULT_SUBDIR = "efficiency-store"
OBSERVATIONS = "observations.jsonl"
#: each device's own deviation from the fleet (the fleet's from the proxy is the learner's
#: ``PROXY_TRUST``)
DEVICE_TRUST = PriorTrust(offset=0.25, slope=0.04, smooth=0.08, length=1.5, indep=0.04)
MAX_LINE = 4096


@dataclass(frozen=True)
class Observation:
    """One device's evidence from one round (its learnt samples-to-target at a batch size)."""

    round: int
    device: str
    batch_size: int
    samples_to_target: float
    log_sd: float
    reached: bool
    at_utc: str = ""
    shipped: str = ""  # the efficiency it was shipped that round (source)

    @classmethod
    def from_row(
        cls, server_round: int, row: dict[str, Any], shipped: str = ""
    ) -> Observation | None:
        """The evidence a report row carries, or None (it learnt nothing, or the values are
        not plausible: they came from another machine)."""
        b, n, sd = (
            row.get("learned_batch_size"),
            row.get("learned_samples"),
            row.get("learned_log_sd"),
        )
        if not (_is_number(b) and _is_number(n) and _is_number(sd)):
            return None
        if not (b >= 1 and 0 < n < 1e15 and 0 < sd < 100) or b != int(b):
            return None
        return cls(
            int(server_round), str(row.get("device")), int(b), float(n), float(sd),
            row.get("status") in ("ok", "late"),
            datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), shipped,
        )  # fmt: skip


class EfficiencyStore:
    """The store under ``root`` (created on first write)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    # -- evidence --------------------------------------------------------------------------------
    def record(
        self, server_round: int, rows: list[dict[str, Any]], shipped: dict[str, str]
    ) -> list[Observation]:
        """Keep every row's evidence; a round recorded again replaces its lines (a coordinator
        restarted after writing part of them)."""
        new = [
            o
            for r in rows
            if (o := Observation.from_row(server_round, r, shipped.get(str(r.get("device")), "")))
        ]
        old = [o for o in self.observations() if o.round != server_round]
        text = "".join(json.dumps(asdict(o), sort_keys=True) + "\n" for o in old + new)
        self.root.mkdir(parents=True, exist_ok=True)
        atomic_write_text(str(self.root / OBSERVATIONS), text)
        return new

    def observations(self) -> list[Observation]:
        path = self.root / OBSERVATIONS
        if not path.is_file():
            return []
        out = []
        for lineno, line in enumerate(path.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            if len(line) > MAX_LINE:
                raise InputError(f"{path}: line {lineno}: longer than {MAX_LINE} characters")
            try:
                out.append(Observation(**json.loads(line)))
            except (ValueError, TypeError) as exc:
                raise InputError(f"{path}: line {lineno}: not an observation ({exc})") from None
        return out

    # -- what to ship ----------------------------------------------------------------------------
    def shipments(
        self, prior: Efficiency, devices: list[str], server_round: int
    ) -> dict[str, Efficiency]:
        """Each device's efficiency for ``server_round`` (those with nothing to learn from get
        none: the proxy's as shipped), written to ``shipped/round-NNN.json``."""
        obs = [o for o in self.observations() if o.round < server_round]
        if not obs:
            return {}
        out = posteriors(prior, obs, devices)
        record = {
            name: {
                "batch_sizes": eff.batch_sizes,
                "samples_to_accuracy": [eff.samples[b] for b in eff.batch_sizes],
                "std": [eff.std.get(b) for b in eff.batch_sizes],
                "learned_from": eff.metadata.get("learned_from", ""),
            }
            for name, eff in out.items()
        }
        (self.root / "shipped").mkdir(parents=True, exist_ok=True)
        atomic_write_text(
            str(self.root / "shipped" / f"round-{server_round:03d}.json"),
            json.dumps({"round": server_round, "prior": prior.source, "devices": record}, indent=1)
            + "\n",
        )
        return out


def posteriors(
    prior: Efficiency, obs: list[Observation], devices: list[str]
) -> dict[str, Efficiency]:
    """The hierarchical posterior (module docstring) for every device named."""
    bs = sorted(prior.reached)
    index = {b: k for k, b in enumerate(bs)}
    mu0 = np.log([prior.reached[b] for b in bs])
    kf = np.array(prior_cov(bs, PROXY_TRUST))
    kg = np.array(prior_cov(bs, DEVICE_TRUST))
    usable = [o for o in obs if o.batch_size in index]
    # fleet level in information form; each observation's noise includes its device's own part
    lam0 = np.linalg.inv(kf)
    contrib: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    lam, eta = lam0.copy(), np.zeros(len(bs))
    for o in usable:
        k = index[o.batch_size]
        v = o.log_sd**2 + kg[k, k]
        a = np.zeros(len(bs))
        a[k] = 1.0
        dl, de = np.outer(a, a) / v, a * (math.log(o.samples_to_target) - mu0[k]) / v
        lam += dl
        eta += de
        c = contrib.get(o.device, (np.zeros_like(lam), np.zeros_like(eta)))
        contrib[o.device] = (c[0] + dl, c[1] + de)
    out: dict[str, Efficiency] = {}
    for name in devices:
        dl, de = contrib.get(name, (0.0, 0.0))
        cov_f = np.linalg.inv(lam - dl)  # the fleet without this device's own evidence
        mean = mu0 + cov_f @ (eta - de)
        cov = cov_f + kg
        mine = [o for o in usable if o.device == name]
        for o in mine:  # the device's own deviation, conditioned on its evidence
            k = index[o.batch_size]
            s = cov[k, k] + o.log_sd**2
            gain = cov[:, k] / s
            mean = mean + gain * (math.log(o.samples_to_target) - mean[k])
            cov = cov - np.outer(gain, cov[k, :])
        sd = np.sqrt(np.clip(np.diag(cov), 0.0, None))
        med = np.exp(mean)
        used = sorted({(o.round, o.device) for o in usable})
        out[name] = Efficiency(
            {b: float(med[index[b]]) for b in bs},
            {b: float(med[index[b]] * sd[index[b]]) for b in bs},
            {b: len(usable) for b in bs},
            source=f"learned:{prior.source}",
            metadata={
                # the law's error is the model's and optimizer's, not the data's: it carries over
                **{k: v for k, v in prior.metadata.items() if k == "noise_law_err"},
                "source": "learned",
                "learned_from": f"{len(used)} observation(s), {len(mine)} of this device",
            },
        )
    return out


def default_store(state_dir: str | Path) -> Path:
    return Path(state_dir) / DEFAULT_SUBDIR


def store_path(run: Any, fleet_path: str, run_dir: str | Path) -> Path:
    """``[run] efficiency_store`` (relative to the fleet file) or the run directory's."""
    raw = run.efficiency_store
    if not raw:
        return default_store(run_dir)
    from fleet.config.fleetfile import run_path

    return run_path(raw, fleet_path)


def _is_number(v: object) -> TypeGuard[int | float]:
    """A number of a report row (a bool is an int to Python, not a number here)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)

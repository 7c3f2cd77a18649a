"""What a device minimises when it selects (b, f): the objective registry.

An objective is one ``Objective`` entry in ``OBJECTIVES``; the CLI's ``--objective`` choices,
the fleet file's ``[run] objective``, the train instruction's validation, the selection index
and ``powerfleet compare``'s "ours-<name>" rows all read this table, so adding an objective is
one entry (``register_objective``) and nothing else. See docs/architecture.md.

Two kinds of objective:

- a *per-sample cost* (``cost``): the price of one sample at a profiled point (seconds for
  ``time``, joules for ``energy``). Selection predicts ``cost(p) x N_s_acc(b)`` and takes the
  argmin; the index keeps a running best per batch size so a query is a binary search.
- a *picker* (``pick``) for objectives that need more than a ranking, typically extra context
  (a deadline in seconds): it receives every feasible candidate as a ``Choice`` with its
  predicted time and energy, plus the keyword context the caller passed to ``select(...,
  **context)``, and returns the one to run (or None: nothing meets it). ``context`` names the
  keywords it requires; selection refuses a call that lacks one with an ``InputError``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fleet.registry import Registry

if TYPE_CHECKING:  # type hints only: fleetconfig imports this table, and profile imports that
    from fleet.profile import Point
    from fleet.selection import Choice


@dataclass(frozen=True)
class Objective:
    """One way of ranking operating points (see the module docstring)."""

    name: str
    cost: Callable[[Point], float]  # per-sample cost; ties and the fast index use it
    help: str = ""
    needs_power: bool = False  # refuse time-only profiles (the cost reads mean power)
    context: tuple[str, ...] = ()  # keyword context select() must be given
    pick: Callable[[list[Choice], dict[str, Any]], Choice | None] | None = None


def time_per_sample(p: Point) -> float:
    return p.time_per_batch_s / p.batch_size


def energy_per_sample(p: Point) -> float:
    return p.mean_power_w * p.time_per_batch_s / p.batch_size


OBJECTIVES: Registry[Objective] = Registry("objective")


def register_objective(objective: Objective) -> Objective:
    return OBJECTIVES.register(objective.name, objective)


def unregister_objective(name: str) -> None:
    OBJECTIVES.unregister(name)


def get_objective(name: str) -> Objective:
    """The named objective, or one InputError listing the known ones."""
    return OBJECTIVES.get_entry(name)


register_objective(
    Objective("time", time_per_sample, "reach the target accuracy soonest (Algorithm 1)")
)
register_objective(
    Objective(
        "energy",
        energy_per_sample,
        "reach the target with the least energy (mean power x time)",
        needs_power=True,
    )
)

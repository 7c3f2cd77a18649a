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

An objective whose choice depends on where the device stands in its round (how much of the
work is done, how far the clock has run) also gives a *per-step chooser* (``steps``): a factory
``steps(points, shipped, schedule, context, source)`` returning a ``StepChooser`` that the
device round asks at every budget step instead of re-selecting, and whose ``verdict()`` may
give the row a status of its own (``deadline``: ``late`` when the device finished after the
deadline, whatever its plan said).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from fleet.common.registry import Registry
from fleet.core.choice import Choice
from fleet.core.deadline import DeadlineChooser, pick_deadline
from fleet.core.efficiency import Efficiency
from fleet.method.budget import BudgetStep
from fleet.method.point import Point
from fleet.method.selection import energy_per_sample, time_per_sample


class StepChooser(Protocol):
    """A device's choice at each budget step of its round (see the module docstring)."""

    def __call__(self, k: int, clock_s: float, done: float) -> Choice | None: ...

    def verdict(self, finish_s: float | None = None) -> tuple[str | None, str]:
        """(a status replacing ``ok``, or None; a note for the row's message, or ""), given
        the device's actual clock at the target (``finish_s``)."""
        ...


StepsFactory = Callable[
    [Sequence[Point], Efficiency, Sequence[BudgetStep], dict[str, Any], str], StepChooser
]


@dataclass(frozen=True)
class Objective:
    """One way of ranking operating points (see the module docstring)."""

    name: str
    # per-sample cost (the kernel's ``time_per_sample``/``energy_per_sample`` for the built-in
    # ones); eq. 4 (``fleet.method.selection.choose``) and its fast index rank with it
    cost: Callable[[Point], float]
    help: str = ""
    needs_power: bool = False  # refuse time-only profiles (the cost reads mean power)
    context: tuple[str, ...] = ()  # keyword context select() must be given
    pick: Callable[[list[Choice], dict[str, Any]], Choice | None] | None = None
    steps: StepsFactory | None = None  # per-step chooser for the device round


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


def _deadline_pick(candidates: list[Choice], context: dict[str, Any]) -> Choice | None:
    return pick_deadline(candidates, context["deadline_s"])


def _deadline_steps(
    points: Sequence[Point],
    shipped: Efficiency,
    schedule: Sequence[BudgetStep],
    context: dict[str, Any],
    source: str,
) -> StepChooser:
    return DeadlineChooser(points, shipped, schedule, context["deadline_s"], source)


register_objective(
    Objective(
        "deadline",
        time_per_sample,  # ties and the fast index; the choice itself is the picker's
        "finish by the round deadline (deadline_s) on the least energy; late: the fastest",
        needs_power=True,
        context=("deadline_s",),
        pick=_deadline_pick,
        steps=_deadline_steps,
    )
)

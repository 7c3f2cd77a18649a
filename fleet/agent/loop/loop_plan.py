"""What the closed loop runs on: one record from the request (or the command line) to the loop.

Why a record: the agent's ``train`` request and ``powerfleet train`` both turn their inputs into
the same ten settings (the profile's points, the shipped efficiency, the budget source, the
objective and its deadline, the guard's window, drift, pacing, learning), checked once up front
(``fleet/agent/protocol/train_args.closed_loop_args`` for the agent). Carried as a typed record,
not a dict, a misspelt or missing setting is an error where it is made, not a default where it
is read. NamedTuple for Python 3.6.
"""

from typing import Any, Dict, List, NamedTuple, Optional

from fleet.method.budget import BudgetSource
from fleet.method.point import Point

_LoopFields = NamedTuple(
    "_LoopFields",
    [
        ("points", List[Point]),
        ("efficiency", Dict[int, float]),
        ("source", BudgetSource),
        ("objective", str),
        ("deadline_s", Optional[float]),
        ("guard_window_s", float),
        ("drift", Optional[Dict[str, Any]]),
        ("pace", bool),
        ("learn", str),
        ("efficiency_meta", Optional[Dict[str, Any]]),
    ],
)


class LoopPlan(_LoopFields):
    """The closed loop's inputs. ``drift``: the drift watch's keywords
    (``driftwatch.DriftWatch``: ``rows``/``comments`` of the profile, ``out_path``, tolerances;
    None or ``{"off": True}``: no watch). ``pace``: every step lasts at least the profile's
    step time at its point (a rehearsal on a faster host keeps the board's timeline).
    ``learn``: ``efficiency_learner.MODES``; ``efficiency_meta`` (``rel_std``, ``source``,
    ``law_err``) says how far the shipped vector is trusted."""

    __slots__ = ()

    def __new__(
        cls,
        points: List[Point],
        efficiency: Dict[int, float],
        source: BudgetSource,
        objective: str = "time",
        deadline_s: Optional[float] = None,
        guard_window_s: float = 0.2,
        drift: Optional[Dict[str, Any]] = None,
        pace: bool = False,
        learn: str = "none",
        efficiency_meta: Optional[Dict[str, Any]] = None,
    ) -> "LoopPlan":
        return super().__new__(
            cls, points, efficiency, source, objective, deadline_s, guard_window_s, drift, pace,
            learn, efficiency_meta,
        )  # fmt: skip

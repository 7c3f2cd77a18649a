"""What the closed loop runs on: one record from the request (or the command line) to the loop.

Why a record: the agent's ``train`` request and ``powerfleet train`` both turn their inputs into
the same ten settings (the profile's points, the shipped efficiency, the budget source, the
objective and its deadline, the guard's window, drift, pacing, learning), checked once up front
(``fleet/agent/protocol/train_args.closed_loop_args`` for the agent). Carried as a typed record,
not a dict, a misspelt or missing setting is an error where it is made, not a default where it
is read. NamedTuple for Python 3.6.

``ClosedLoop`` itself takes three records, by who decides them: this plan (what the request
decided), ``LoopParts`` (what the run built for the loop once its data and sampler are known)
and ``LoopHooks`` (the clock, sleep, log and sampling a test or a runtime swaps in; a run's
decisions are the same with any of them).
"""

import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional

from fleet.agent.learning.efficiency_learner import EfficiencyLearner
from fleet.agent.loop.driftwatch import DriftWatch
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


_PartFields = NamedTuple(
    "_PartFields",
    [
        ("drift", Optional[DriftWatch]),
        ("learner", Optional[EfficiencyLearner]),
        ("max_batch", Optional[int]),
    ],
)


class LoopParts(_PartFields):
    """What the run builds for the loop from the plan (``underbudget.train_under_budget``):
    the drift watch (``drift``, built from ``LoopPlan.drift``'s keywords at the sampler's
    rate), the learner (built from ``LoopPlan.learn``/``efficiency_meta`` and the trainer
    plan's target and cadence) and ``max_batch`` (the training set's size: no batch larger).
    Distinct from the plan because they need what only the run knows (the data, the sensor's
    rate, the trainer's plan), and the watch and learner are live objects with state, not
    settings: the loop reads these and never ``LoopPlan.drift``/``learn``. None: no watch, no
    learner, no cap."""

    __slots__ = ()

    def __new__(
        cls,
        drift: Optional[DriftWatch] = None,
        learner: Optional[EfficiencyLearner] = None,
        max_batch: Optional[int] = None,
    ) -> "LoopParts":
        return super().__new__(cls, drift, learner, max_batch)


_LoopHookFields = NamedTuple(
    "_LoopHookFields",
    [
        ("hz", float),
        ("settle_s", float),
        ("clock", Callable[[], float]),
        ("sleep", Callable[[float], None]),
        ("log", Optional[Callable[[str], None]]),
        ("restore_on_exit", bool),
    ],
)


class LoopHooks(_LoopHookFields):
    """How the loop meets the world: ``hz`` the rail's sampling rate (capped at the sensor's
    refresh), ``settle_s`` the wait after a clock change, ``clock``/``sleep`` the monotonic
    time and the pacing's wait (a test's virtual clock), ``log`` each note as it is made,
    ``restore_on_exit`` whether the device is given back when the loop's block ends."""

    __slots__ = ()

    def __new__(
        cls,
        hz: float = 20.0,
        settle_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        log: Optional[Callable[[str], None]] = None,
        restore_on_exit: bool = True,
    ) -> "LoopHooks":
        return super().__new__(cls, hz, settle_s, clock, sleep, log, restore_on_exit)

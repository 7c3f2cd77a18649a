"""The statuses a device can have in a round, in one place.

Why a module of its own: the coordinator writes them into the round state, ``powerfleet status``
shows them and the Prometheus text one-hot encodes them over the *whole* set (a dashboard needs
the zeros too), so every one of them must agree on the same list. ``TRAINED`` (ok, late) stays
in ``device_round``: it is what a round counts, not what a device is.
"""

from __future__ import annotations

#: While the round runs: not heard from yet, training (segments coming back), past the
#: deadline without a final reply.
RUNNING = ("pending", "running", "overdue")

#: How a device ended its round (``lost``: its node went offline; its last progress is kept;
#: ``selected``: a board without the trainer only locked its chosen point; ``interrupted``: the
#: run itself stopped before the device finished (Ctrl-C, SIGTERM, a killed or crashed
#: coordinator), its last progress kept; a resumed run takes it up again).
FINAL = (
    "ok",
    "late",
    "lost",
    "infeasible",
    "not reached",
    "over-budget",
    "error",
    "selected",
    "interrupted",
)

#: What a run as a whole is: its writer at work, done, or stopped before its end.
RUN = ("running", "finished", "interrupted")

#: Every status, in the order tables and metrics list them.
ALL = RUNNING + FINAL


def run_status(state: dict) -> str:
    """The run's status (one of ``RUN``) from its round state (``fleet/reports/roundstate``):
    ``finished`` once it says so, ``interrupted`` when it stopped before its end (recorded by
    its writer on a signal, or by a reader that found the writer gone), else ``running``."""
    if state.get("finished"):
        return "finished"
    return "interrupted" if state.get("interrupted") else "running"

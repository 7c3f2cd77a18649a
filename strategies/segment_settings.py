"""The segmented round's settings and its driver's view of one device.

Apart from the driver (``segmented.py``) because they are plain data the run's setup
(``segmented_run.py``, ``server_app.py``) builds and the driver reads: how long a segment is,
how long a wait may be, how often the state is written; and, per device, its node, its message
in flight and what its replies taught about its pace.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleet.planning import round_logic as logic


@dataclass(frozen=True)
class SegmentSettings:
    segment_s: float = logic.SEGMENT_S  # device-clock seconds per segment
    poll_s: float = 0.25
    node_wait_s: float = 300.0  # for the expected devices to identify
    # an identity query unanswered this long is sent again (a loaded SuperLink can lose it, or
    # the ClientApp's answer, with no error to anyone: seen at 40 SuperNodes)
    identify_wait_s: float = 60.0
    first_allowance_s: float = 900.0  # a device's first segment: agent start, profiling
    overdue_factor: float = 3.0
    overdue_slack_s: float = 30.0  # on top of a segment's expected wall before it is overdue
    # an overdue segment is sent again once it waited this many times its overdue threshold
    # (at most ``max_resends`` times a device until a reply comes): a SuperLink under load can
    # lose a message on its way to a node that stays online ("database is locked" on the pull),
    # and no reply would come before the message's TTL, an hour later
    resend_factor: float = 2.0
    max_resends: int = 3
    max_crashes: int = 3  # ClientApp crashes in a row before the device is an error
    write_every_s: float = 0.5  # state.json at most this often (and at every round's end)
    # ... and at most this share of the wall spent writing it: at 1,000 devices (a 0.25 s
    # write) a status at most ~5 s old, at tens of devices the 0.5 s gap (docs/deploy-load.md)
    write_share: float = 0.05
    # a simulation: every device lives on one virtual clock, so segments go out in lock-step of
    # device time (none runs ahead of the slowest) and the plan is revised only between steps;
    # progress then arrives in the order it would in the world, whatever this machine's speed
    lockstep: bool = False


@dataclass
class Link:
    """The driver's view of one device (not persisted: rebuilt from identities)."""

    node: int | None = None
    msg_id: str | None = None
    sent_at: float = 0.0
    sent_time_s: float = 0.0  # the device's clock when the segment was sent
    wall_per_s: float | None = None  # wall seconds per device second, from its replies
    pace: float | None = None  # device seconds per wall second a paced simulated node said
    crashes: int = 0
    stalls: int = 0  # running replies in a row without progress
    resends: int = 0  # segments sent again since the last reply (``_check_overdue``)
    weights_to: int | None = None  # the node the round's weights went to

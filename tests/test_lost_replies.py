"""A device that finished while its reply was lost gives the row of the round where nothing was.

The case: a replay device reaches its target inside segment k, writes its checkpoint, and the
reply of that segment never reaches the coordinator (Flower answers ``REPLY_MESSAGE_UNAVAILABLE``,
so the coordinator sends segment k again from the progress it last heard; or the coordinator is
stopped before it hears the reply and resumes from ``state.json``). The device resumes from the
later of the coordinator's view and its own checkpoint (``clients/segments.py``): it is done
already, so the re-sent segment must end the round exactly as the lost reply would have.
Before the fix a learning device's ``learned_samples`` moved (178,742 -> 179,131 on the default
fleet's ``tx2nx-free``): the learner took the target as reached a second time, re-pricing the
samples of the batch sizes it had left with a belief that already held the exact count.

In process and cheap: the coordinator's own code (``strategies/server_app.run_fleet``, its
segmented loop and book) over the real ClientApp on an in-process grid
(``tests/inprocess_grid.py``) whose nodes checkpoint in a work dir, against the direct engine's
rows (``tests/test_one_round.py`` holds the two engines equal when nothing is lost), for every
shipped fleet (``large`` as one device per kind) under every objective.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest
from flwr.app import Error, Message
from flwr.common.constant import ErrorCode

from clients import records
from clients import segment_wire as wire
from fleet.common.signals import Interrupted
from fleet.config.fleetfile import load_fleet
from fleet.reports import roundstate
from simulations.runner import simulate
from strategies.server_app import ServerSettings, run_fleet
from tests.inprocess_grid import InProcessGrid, app_identity
from tests.row_compare import diff
from tests.test_one_round import OBJECTIVES, SHIPPED, fleet_as, revisions

pytestmark = pytest.mark.slow  # about a second of CPU a case (the analogue fleet: a few)


def segment_replies(grid: InProcessGrid, messages: list[Message], ids: list[str]):
    """(message, id, decoded row) of each segment message the grid answered without an error."""
    for msg, mid in zip(messages, ids, strict=True):
        reply = grid.replies[mid]
        if msg.metadata.message_type.endswith(".segment") and not reply.has_error():
            row = records.decode_reply(
                reply.content.metric_records[records.METRICS],
                reply.content.config_records[records.REPORT],
            )
            yield msg, mid, row


class LossyGrid(InProcessGrid):
    """Nodes that keep their own checkpoint (``work-dir``, as a deployed SuperNode does). The
    first final reply (the device reached its target, or ended otherwise) of each device in
    ``lose`` is lost on the way back (the coordinator hears ``REPLY_MESSAGE_UNAVAILABLE``);
    with ``stop``, the coordinator is stopped instead the moment that reply would arrive."""

    def __init__(self, nodes: int, work: Path, lose: Iterable[str], stop: bool = False) -> None:
        super().__init__(nodes)
        for node, ctx in self.contexts.items():
            folder = work / f"node-{node}"
            folder.mkdir(parents=True, exist_ok=True)
            ctx.node_config["work-dir"] = str(folder)
        self.lose, self.stop = set(lose), stop
        self.lost: list[str] = []
        self.held: set[str] = set()  # message ids whose reply stops the coordinator

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        messages = list(messages)
        ids = list(super().push_messages(messages))
        for msg, mid, row in segment_replies(self, messages, ids):
            if row["status"] == "running" or row["device"] not in self.lose:
                continue
            self.lose.discard(row["device"])
            self.lost.append(str(row["device"]))
            if self.stop:
                self.held.add(mid)
                continue
            with app_identity(msg.metadata.dst_node_id):
                lost = Error(ErrorCode.REPLY_MESSAGE_UNAVAILABLE, "reply lost on its way")
                self.replies[mid] = Message(lost, reply_to=msg)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        message_ids = list(message_ids)
        if self.held & set(message_ids):
            self.held.clear()
            raise Interrupted("stopped before a finished device's reply was heard")
        return super().pull_messages(message_ids)


def coordinator(fleet_file: Path, run_dir: Path, grid: InProcessGrid) -> dict:
    """The coordinator's run over ``grid`` (replies are there at once: no poll). No weights
    shipped: a replay device trains none, and the rows do not depend on them."""
    settings = ServerSettings(str(fleet_file), str(run_dir), ship_weights=False, poll_s=0.0)
    with app_identity():
        return run_fleet(grid, settings)


def assert_same_round(got: dict, want: dict) -> None:
    assert [r["device"] for r in got["devices"]] == [r["device"] for r in want["devices"]]
    for a, b in zip(got["devices"], want["devices"], strict=True):
        assert diff(a, b, a["device"]) == []
    assert diff(got["fleet"], want["fleet"], "fleet") == []
    assert got.get("deadline_s") == want.get("deadline_s")
    assert revisions(got) == revisions(want)


class Unfaulted:
    """Each shipped fleet under each objective (``large``: one device per kind) as a file, and
    its direct engine's report, made once per test session (both tests compare with it)."""

    def __init__(self, tmp: pytest.TempPathFactory) -> None:
        self.tmp = tmp
        self.done: dict[tuple[str, str], tuple[Path, dict]] = {}

    def __call__(self, name: str, objective: str) -> tuple[Path, dict]:
        if (name, objective) not in self.done:
            folder = self.tmp.mktemp(f"{name}-{objective}")
            fleet_file = fleet_as(folder, name, objective, one_per_kind=name == "large")
            self.done[name, objective] = fleet_file, simulate(fleet_file, "direct", folder / "run")
        return self.done[name, objective]


@pytest.fixture(scope="module")
def unfaulted(tmp_path_factory: pytest.TempPathFactory) -> Unfaulted:
    return Unfaulted(tmp_path_factory)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("name", SHIPPED)
def test_a_lost_final_reply_gives_the_unfaulted_rows(
    tmp_path: Path, unfaulted: Unfaulted, name: str, objective: str
) -> None:
    """Every device's finishing reply lost once: the coordinator sends that segment again, the
    device answers from its checkpoint, and every row is the unfaulted round's."""
    fleet_file, want = unfaulted(name, objective)
    names = [r["device"] for r in want["devices"]]
    grid = LossyGrid(len(load_fleet(fleet_file).devices), tmp_path / "nodes", names)
    got = coordinator(fleet_file, tmp_path / "lossy", grid)
    assert sorted(grid.lost) == sorted(names)  # each device's final reply was lost once
    assert_same_round(got, want)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("objective", ["time", "deadline"])
def test_a_coordinator_stopped_before_a_final_reply_resumes_to_the_unfaulted_rows(
    tmp_path: Path, unfaulted: Unfaulted, objective: str
) -> None:
    """The coordinator stops the moment a learning device's finishing reply would arrive (the
    device has finished and checkpointed; state.json still says ``running``), then runs again
    on the same run directory: the device resumes from its checkpoint, the rows are unfaulted.
    (The deadline objective: a re-planned deadline resumed from state.json too.)"""
    fleet_file, want = unfaulted("default", objective)
    learnt = [r["device"] for r in want["devices"] if r.get("learned_samples") is not None]
    nodes, run_dir = len(load_fleet(fleet_file).devices), tmp_path / "run"
    grid = LossyGrid(nodes, tmp_path / "nodes", learnt, stop=True)
    with pytest.raises(Interrupted):
        coordinator(fleet_file, run_dir, grid)
    assert grid.lost  # at least one device finished unheard
    assert roundstate.read_state(run_dir)["devices"][grid.lost[0]]["status"] == "interrupted"
    got = coordinator(fleet_file, run_dir, LossyGrid(nodes, tmp_path / "nodes", []))
    assert_same_round(got, want)


class SilentGrid(InProcessGrid):
    """The ``nth`` segment message to each device in ``lose`` vanishes on its way (as a loaded
    SuperLink's failed pull loses it: the node stays online, no reply, no error ever). The
    second by default: after a first reply the coordinator knows the device's pace, so its
    overdue wait is the pace's, not the first segment's allowance of real device time. With
    ``pace``, each node's identity says it is a simulated device paced that fast (as a paced
    replay SuperNode's does), which is all the coordinator knows before a first reply."""

    def __init__(
        self, nodes: int, lose: Iterable[str], nth: int = 2, pace: float | None = None
    ) -> None:
        super().__init__(nodes)
        self.lose, self.vanished = set(lose), []  # type: ignore[var-annotated]
        self.seen: dict[str, int] = {}
        self.nth, self.pace = nth, pace

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        messages = list(messages)
        ids = list(super().push_messages(messages))
        for msg, mid in zip(messages, ids, strict=True):
            reply = self.replies.get(mid)
            if self.pace and msg.metadata.message_type.endswith(".identify") and reply:
                reply.content.config_records[wire.IDENTITY]["pace"] = self.pace
        for _msg, mid, row in segment_replies(self, messages, ids):
            device = str(row["device"])
            self.seen[device] = self.seen.get(device, 0) + 1
            if device in self.lose and self.seen[device] == self.nth:
                self.lose.discard(device)
                self.vanished.append(device)
                del self.replies[mid]  # never answered
        return ids


def silent_round(tmp_path: Path, nth: int, pace: float | None = None) -> None:
    """The default fleet's round with the ``nth`` segment message of its first two devices
    lost (``SilentGrid``), short waits: it ends with the direct engine's rows."""
    fleet_file = fleet_as(tmp_path, "default", "time")
    want = simulate(fleet_file, "direct", tmp_path / "direct")
    names = [d.name for d in load_fleet(fleet_file).devices]
    grid = SilentGrid(len(names), names[:2], nth=nth, pace=pace)
    settings = ServerSettings(
        str(fleet_file), str(tmp_path / "run"), ship_weights=False, poll_s=0.01,
        round_timeout_s=0.0, overdue_slack_s=0.2,
    )  # fmt: skip
    with app_identity():
        got = run_fleet(grid, settings)
    assert sorted(grid.vanished) == sorted(names[:2]) and grid.lose == set()
    assert [r["device"] for r in got["devices"]] == [r["device"] for r in want["devices"]]
    for a, b in zip(got["devices"], want["devices"], strict=True):
        assert diff(a, b, a["device"]) == []
    assert diff(got["fleet"], want["fleet"], "fleet") == []


def test_a_segment_lost_without_an_error_is_sent_again_and_the_rows_are_the_unfaulted(tmp_path):
    """A message lost inside Flower leaves its device overdue on an online node: after twice
    its overdue wait the coordinator sends the segment again, and the round ends with the
    direct engine's rows (before: it waited for the message's TTL, an hour)."""
    silent_round(tmp_path, nth=2)


@pytest.mark.timeout(120)
def test_a_lost_first_segment_of_a_paced_device_is_sent_again_at_its_pace(tmp_path):
    """Before any reply the coordinator knows a paced simulated device's pace only from its
    identity: a lost first segment is sent again after twice (first allowance + 3 x segment
    at that pace + slack), here under a second. Before: one wall second per device second was
    assumed, 3 x 600 s of waiting per 600 s segment, so the round hung past this test's guard
    (an N = 40 load run's first segments waited for ~2 hours)."""
    silent_round(tmp_path, nth=1, pace=1e6)


class MuteIdentifyGrid(InProcessGrid):
    """Identity queries that vanish without a reply or an error (a ClientApp whose answer a
    loaded SuperLink refused, seen at 40 SuperNodes): the first ``k`` to each node in
    ``mute`` (all of them when ``k`` is None)."""

    def __init__(self, nodes: int, mute: dict[int, int | None]) -> None:
        super().__init__(nodes)
        self.mute, self.swallowed = dict(mute), 0

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        messages = list(messages)
        ids = list(super().push_messages(messages))
        for msg, mid in zip(messages, ids, strict=True):
            node = msg.metadata.dst_node_id
            left = self.mute.get(node, 0)
            if msg.metadata.message_type.endswith(".identify") and (left is None or left > 0):
                self.mute[node] = None if left is None else left - 1
                self.swallowed += 1
                del self.replies[mid]
        return ids


def mute_round(tmp_path: Path, mute: dict[int, int | None]) -> tuple[dict, dict, int]:
    fleet_file = fleet_as(tmp_path, "default", "time")
    want = simulate(fleet_file, "direct", tmp_path / "direct")
    grid = MuteIdentifyGrid(len(load_fleet(fleet_file).devices), mute)
    # node_wait_s is wall time: a node muted twice answers its third ask, two identify waits
    # (a fifth each) in; 5 s leaves it three seconds of a loaded host's slack, not 0.6
    settings = ServerSettings(
        str(fleet_file), str(tmp_path / "run"), ship_weights=False, poll_s=0.01, node_wait_s=5.0
    )
    with app_identity():
        got = run_fleet(grid, settings)
    return got, want, grid.swallowed


@pytest.mark.timeout(120)
def test_an_identity_query_lost_without_a_reply_is_asked_again(tmp_path):
    """Before: the node stayed 'asked' for ever and its device was left out of the report
    (38 rows for a fleet of 40 at N = 40). Now it is asked again after ``identify_wait_s``
    (a fifth of ``node_wait_s``) and the round ends with the direct engine's rows."""
    got, want, swallowed = mute_round(tmp_path, {1: 1, 2: 2})
    assert swallowed == 3
    assert [r["device"] for r in got["devices"]] == [r["device"] for r in want["devices"]]
    for a, b in zip(got["devices"], want["devices"], strict=True):
        assert diff(a, b, a["device"]) == []


@pytest.mark.timeout(120)
def test_a_device_no_node_ever_runs_is_reported_lost_not_left_out(tmp_path):
    got, want, _ = mute_round(tmp_path, {1: None})
    rows = {r["device"]: r for r in got["devices"]}
    assert list(rows) == [r["device"] for r in want["devices"]]  # all of them, in fleet order
    never = [n for n, r in rows.items() if r["status"] == "lost"]
    assert len(never) == 1 and "did not connect within node-wait-s" in rows[never[0]]["message"]
    for a, b in zip(got["devices"], want["devices"], strict=True):
        if a["device"] not in never:  # their own work as unfaulted (the round's end moved)
            for key in ("status", "samples", "time_s", "energy_j", "batch_size", "freq_mhz"):
                assert a[key] == b[key], (a["device"], key)


@pytest.mark.timeout(120)
def test_a_partial_federation_reports_the_devices_no_node_ran(tmp_path):
    """``num-nodes`` below the fleet's size: the round waits for that many devices and runs
    them; the others are in the report as lost, saying why, in fleet order (before: left out,
    and the report could not tell a device that never ran from one not in the fleet)."""
    fleet_file = fleet_as(tmp_path, "default", "time")
    want = simulate(fleet_file, "direct", tmp_path / "direct")
    names = [r["device"] for r in want["devices"]]
    nodes = len(names) - 2
    settings = ServerSettings(
        str(fleet_file), str(tmp_path / "run"), num_nodes=nodes, ship_weights=False, poll_s=0.0,
        engine="flower-deployment",  # SuperNodes that come and go, not a simulation's
    )  # fmt: skip
    with app_identity():
        got = run_fleet(InProcessGrid(nodes), settings)
    rows = {r["device"]: r for r in got["devices"]}
    assert list(rows) == names
    never = [n for n, r in rows.items() if r["status"] == "lost"]
    assert len(never) == 2
    for n in never:
        why = f"(no SuperNode ran it: the round waited for num-nodes = {nodes} of {len(names)})"
        assert why in rows[n]["message"]
        assert rows[n]["samples"] == 0 and rows[n]["energy_j"] == 0
    for a, b in zip(got["devices"], want["devices"], strict=True):
        if a["device"] not in never:  # their own work as unfaulted
            for key in ("status", "samples", "time_s", "energy_j", "batch_size", "freq_mhz"):
                assert a[key] == b[key], (a["device"], key)


@pytest.mark.timeout(120)
def test_a_partial_federation_of_two_rounds_does_not_wait_for_the_devices_no_node_ran(tmp_path):
    """Round 2 starts from round 1's book: the devices no node ran there are not waited for
    as devices that had a node (``node-wait-s`` here is far beyond the test's timeout), and are
    reported lost again with the same reason."""
    fleet_file = fleet_as(tmp_path, "default", "time")
    text = fleet_file.read_text()
    assert "\nrounds = 1\n" in text
    fleet_file.write_text(text.replace("\nrounds = 1\n", "\nrounds = 2\n", 1))
    names = [d.name for d in load_fleet(fleet_file).devices]
    assert load_fleet(fleet_file).run.rounds == 2
    nodes = len(names) - 2
    settings = ServerSettings(
        str(fleet_file), str(tmp_path / "run"), num_nodes=nodes, ship_weights=False, poll_s=0.0,
        engine="flower-deployment", node_wait_s=3600.0,
    )  # fmt: skip
    with app_identity():
        got = run_fleet(InProcessGrid(nodes), settings)
    state = roundstate.read_state(tmp_path / "run")
    assert [r["round"] for r in state["completed_rounds"]] == [1, 2]
    rows = {r["device"]: r for r in got["devices"]}
    assert list(rows) == names
    never = [n for n, r in rows.items() if r["status"] == "lost"]
    assert never == names[-2:]
    for n in never:
        assert f"num-nodes = {nodes} of {len(names)}" in rows[n]["message"]


class ErringIdentifyGrid(InProcessGrid):
    """The first identity query to each of the first ``k`` nodes is answered with an error (a
    ClientApp that failed to start on a loaded SuperNode), as Flower answers it."""

    def __init__(self, nodes: int, k: int) -> None:
        super().__init__(nodes)
        self.failing = set(range(1, k + 1))

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        messages = list(messages)
        ids = list(super().push_messages(messages))
        for msg, mid in zip(messages, ids, strict=True):
            node = msg.metadata.dst_node_id
            if msg.metadata.message_type.endswith(".identify") and node in self.failing:
                self.failing.discard(node)
                with app_identity(node):
                    failed = Error(ErrorCode.CLIENT_APP_RAISED_EXCEPTION, "ClientApp failed")
                    self.replies[mid] = Message(failed, reply_to=msg)
        return ids


def test_an_identity_answered_with_an_error_is_asked_again(tmp_path):
    """Before: the coordinator read the error reply's content and the ServerApp failed
    ("Message content is None", seen at 40 SuperNodes); now the node is asked again and the
    round ends with the direct engine's rows."""
    fleet_file = fleet_as(tmp_path, "default", "time")
    want = simulate(fleet_file, "direct", tmp_path / "direct")
    grid = ErringIdentifyGrid(len(load_fleet(fleet_file).devices), 2)
    with app_identity():
        got = run_fleet(grid, ServerSettings(
            str(fleet_file), str(tmp_path / "run"), ship_weights=False, poll_s=0.0
        ))  # fmt: skip
    assert grid.failing == set()
    for a, b in zip(got["devices"], want["devices"], strict=True):
        assert diff(a, b, a["device"]) == []
    assert len(got["devices"]) == len(want["devices"])

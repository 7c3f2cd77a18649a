"""The segmented round: the coordinator drives every device in bounded segments.

Why segments: the paper's fine-tuning runs last 40 minutes to 2 hours on a Nano. A round that is
one request and one reply leaves the coordinator blind for all that time: it cannot show
progress, re-plan, tell a slow device from a dead one, or survive its own restart. Here every
device trains ``segment_s`` seconds of its own clock per ``train.segment`` message and replies
its cumulative progress (``clients/segment_wire.py``); the coordinator's book
(``strategies/round_book.py``) is written to ``run_dir/state.json`` at every change, which is
what ``powerfleet status`` shows and what a restarted coordinator resumes from.

Waits: none is shorter than the work it waits for. A segment is ``overdue`` only after
``overdue_factor`` times its expected wall time (learned from the device's own replies: wall
seconds per device second) plus an allowance for the first segment (agent start, profiling).
An overdue device whose node is still online (its SuperNode's heartbeats reach the SuperLink)
is only slow and is waited for, its segment sent again after ``resend_factor`` times that wait
(a message can be lost inside a loaded SuperLink without an error to anyone); a device is
``lost`` when its node goes offline (Flower answers
``NODE_UNAVAILABLE``, or the node leaves the online list). A node that comes back (a restarted
SuperNode, under a new node id or its old one) identifies itself (``query.identify``) and its
device resumes from its checkpoint. The round ends when no device is pending, running or
overdue; the lost are reported with their last progress.

Hostile or broken replies are refused with one line naming the device and the field
(``clients/reply_check.py``); that device ends as ``error`` and its numbers never reach the
aggregate. Grid errors (the SuperLink frozen or restarting) are logged and retried.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from logging import INFO, WARNING
from pathlib import Path

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid
from flwr.supercore import log

from clients import content as rc
from clients import records
from clients import segment_wire as wire
from clients.reply_check import check_row
from fleet.common.errors import InputError
from fleet.planning import round_logic as logic
from fleet.reports import roundstate
from fleet.rounds.device_round import TRAINED
from fleet.rounds.progress import Progress
from strategies import coordinator
from strategies import round_book as book
from strategies.reply_timings import ReplyTimings, write_gap
from strategies.segment_settings import Link, SegmentSettings
from strategies.strategy import NodesMissing

ReplyHook = Callable[[Message, dict], None]  # a checked segment reply and its decoded row


class SegmentedRound:
    """One round of segments over a grid; ``run()`` returns (rows, FedAvg weights)."""

    def __init__(
        self,
        grid: Grid,
        state: dict,
        run_dir: Path,
        settings: SegmentSettings,
        config: ConfigRecord,
        arrays: ArrayRecord,
        *,
        devices: Iterable[str],
        describe: dict[str, tuple[str, float | None]] | None = None,
        expected: int,
        mode: str = "local",
        on_reply: ReplyHook | None = None,
        plan: bool = False,
        files: roundstate.Writer | None = None,
    ) -> None:
        self.grid, self.state, self.run_dir, self.s = grid, state, Path(run_dir), settings
        # the run's writer (kept across rounds): renders only the devices that changed
        self.files = files or roundstate.Writer(self.run_dir)
        self.config, self.arrays, self.mode = config, arrays, mode
        self.fleet_order = {name: i for i, name in enumerate(devices)}
        self.describe = describe or {}  # name -> (device type, budget): shown before a reply
        self.fleet_devices = set(self.fleet_order)
        self.expected = expected
        self.on_reply = on_reply
        self.plan = plan
        self.links: dict[str, Link] = {}
        self.identified: dict[int, str | None] = {}  # node -> device (None: not ours)
        self.identify_errors: dict[int, int] = {}  # node -> error replies to its identify
        # message id -> (node, when asked): asked again if unanswered for identify_wait_s
        self.identifying: dict[str, tuple[int, float]] = {}
        self.weights: dict[str, tuple[ArrayRecord, float]] = {}
        self.dirty, self.last_write = True, 0.0
        self.write_gap_s = settings.write_every_s
        self.t0 = time.monotonic()
        self._shipped = coordinator.ShippedEfficiency(config)
        self.spare: set[int] = set()  # simulated SuperNodes past the fleet's last device
        self._last_online: set[int] | None = None
        self._sized = False  # the federation's size against the fleet's: said once
        self.timings = ReplyTimings.from_env()  # off unless the load test asks

    # ------------------------------------------------------------------ the loop
    def run(self) -> tuple[list[dict], list[tuple[ArrayRecord, float]]]:
        while True:
            online = self._online()
            if online is not None:
                self._identify(online)
                self._check_size(online)
                self._check_lost(online)
                if self.plan and self._ready() and self.state["plan"].get("deadline_s") is None:
                    self._plan_deadline()
                self._send(online)
            self._pull()
            self._check_overdue()
            self._persist()
            if self._ready() and not logic.active(self.state["devices"]):
                break
            time.sleep(self.s.poll_s)
        fleet = len(self.fleet_order)  # a device no node took by the end (num-nodes < fleet)
        why = f"no SuperNode ran it: the round waited for num-nodes = {self.expected} of {fleet}"
        book.lose_unplaced(self.state, self.fleet_order, self.describe, why, self._rank)
        if self.plan:
            logic.settle(self.state["devices"].values(), self.state.get("plan"))
        self._persist(force=True)
        rows = book.round_rows(self.state)
        self._persist(force=True)
        return rows, list(self.weights.values())

    def _ready(self) -> bool:
        """Every expected device has identified, or the wait for them is over (the missing
        ones of a resumed round are then lost; a fresh round without them fails)."""
        known = [n for n, e in self.state["devices"].items() if e.get("node_id") is not None]
        if len(known) >= self.expected and not any(
            e["status"] == "pending" and e.get("node_id") is None
            for e in self.state["devices"].values()
        ):
            return True
        if self.s.lockstep and self._sized:
            return True  # a simulation's SuperNodes are all there; the missing devices are lost
        if time.monotonic() - self.t0 < self.s.node_wait_s:
            return False
        if not known:
            raise NodesMissing(
                f"no device identified within {self.s.node_wait_s:g} s of {self.expected} "
                "expected; start the SuperNodes or lower num-nodes"
            )
        # every device no node took (a resumed one, or one no node said it runs) is lost now,
        # reported with the reason, not left out of the report
        why = "did not connect within node-wait-s"
        if book.lose_unplaced(self.state, self.fleet_order, self.describe, why, self._rank):
            self.dirty = True
        return True

    # ------------------------------------------------------------------ grid calls
    def _online(self) -> set[int] | None:
        try:
            return {int(n) for n in self.grid.get_node_ids()}
        except Exception as exc:  # noqa: BLE001 - the SuperLink frozen or restarting
            log(WARNING, "segments: the SuperLink did not answer (%s); retrying", _line(exc))
            return None

    def _push(self, msg: Message) -> str | None:
        try:
            ids = list(self.grid.push_messages([msg]))
        except Exception as exc:  # noqa: BLE001
            log(WARNING, "segments: push failed (%s); retrying", _line(exc))
            return None
        return ids[0] if ids and ids[0] else None

    def _pull(self) -> None:
        # message id -> device, once per pull: a reply finds its device without a scan of all
        waiting = {lk.msg_id: name for name, lk in self.links.items() if lk.msg_id is not None}
        pending = list(self.identifying) + list(waiting)
        if not pending:
            return
        try:
            replies = list(self.grid.pull_messages(pending))
        except Exception as exc:  # noqa: BLE001
            log(WARNING, "segments: pull failed (%s); retrying", _line(exc))
            return
        for msg in replies:
            ref = msg.metadata.reply_to_message_id
            if ref in self.identifying:
                self._on_identity(self.identifying.pop(ref)[0], msg)
                continue
            name = waiting.get(ref)
            lk = self.links.get(name) if name is not None else None
            if name is None or lk is None or lk.msg_id != ref:
                continue  # abandoned meanwhile (its node changed)
            lk.msg_id, lk.resends = None, 0
            wall, cpu = time.perf_counter(), time.thread_time()
            self._on_segment(name, lk, msg)
            if self.timings.on:
                wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
                self.timings.handled(name, float(msg.metadata.created_at), wall, cpu)

    # ------------------------------------------------------------------ identities
    def _identify(self, online: set[int]) -> None:
        now = time.monotonic()
        for stale, (node, at) in list(self.identifying.items()):  # lost in a loaded SuperLink
            if now - at > self.s.identify_wait_s:
                del self.identifying[stale]
                log(WARNING, "segments: node %d did not say who it is; asking again", node)
        asked = {node for node, _ in self.identifying.values()}
        for node in sorted(online):
            name = self.identified.get(node)
            if node not in self.identified and node not in asked:
                cfg = ConfigRecord(dict(self.config))
                msg = Message(
                    content=RecordDict({records.CONFIG: cfg}),
                    dst_node_id=node,
                    message_type=f"{MessageType.QUERY}.{wire.IDENTIFY}",
                )
                mid = self._push(msg)
                if mid:
                    self.identifying[mid] = (node, now)
            elif name is not None and self.state["devices"].get(name, {}).get("status") == "lost":
                self._take(name, node)  # its node is back online (the SuperLink was frozen)

    def _check_size(self, online: set[int]) -> None:
        """Once every node online said who it is, one line when federation and fleet differ
        in size. A simulation (``lockstep``) has all its SuperNodes from the start: a device
        without one is lost now, with the reason, not after ``node_wait_s``."""
        stable, self._last_online = online == self._last_online, set(online)
        if self._sized or not online or not stable or self.identifying:
            return
        if any(node not in self.identified for node in online):
            return
        self._sized = True
        devices = len(self.fleet_order)
        sized = f'size it to the fleet: flwr run ... --federation-config "num-supernodes={devices}"'
        if self.spare:
            idle = f"{len(self.spare)} of the {len(online)} SuperNodes have no device"
            log(INFO, "powerfleet: %s (the fleet lists %d): idle; %s", idle, devices, sized)
        if self.s.lockstep:
            why = f"no SuperNode: the simulation has {len(online)} for {devices} devices; {sized}"
            lost = book.lose_unplaced(self.state, self.fleet_order, self.describe, why, self._rank)
            if lost:
                log(INFO, "powerfleet: %d device(s) cannot run: %s", lost, why)
                self.dirty = True

    def _on_identity(self, node: int, msg: Message) -> None:
        if msg.has_error():  # no content to read; asked again unless it keeps failing
            self.identify_errors[node] = self.identify_errors.get(node, 0) + 1
            if self.identify_errors[node] >= self.s.max_crashes:
                self.identified[node] = None
            log(WARNING, "segments: node %d did not identify: %s", node, msg.error.reason)
            return
        spare = wire.spare_of(msg.content)
        if spare is not None:  # counted, said once by _check_size
            self.spare.add(node)
            self.identified[node] = None
            return
        try:
            name = wire.identity_of(msg.content)
        except InputError as exc:
            log(WARNING, "segments: node %d: %s", node, exc)
            self.identified[node] = None
            return
        if name not in self.fleet_devices:
            log(WARNING, "segments: node %d runs %r, which the fleet does not list", node, name)
            self.identified[node] = None
            return
        self.identified[node] = name
        self.links.setdefault(name, Link()).pace = wire.pace_of(msg.content)
        e = self.state["devices"].get(name)
        if e is not None and e["status"] not in logic.ACTIVE + ("lost",):
            return  # finished this round (e.g. before a coordinator restart): not again
        self._take(name, node)

    def _take(self, name: str, node: int) -> None:
        lk = self.links.setdefault(name, Link())
        if lk.node != node:
            lk.msg_id = None  # whatever went to the old node is abandoned
        lk.node = node
        if name not in self.state["devices"] and name in self.describe:
            dtype, budget = self.describe[name]
            self.state["devices"][name] = book.device_entry(name, dtype, budget)
        book.assign(self.state, name, node)
        devices = self.state["devices"]  # fleet order, as the reports keep it
        if list(devices) != sorted(devices, key=self._rank):
            self.state["devices"] = {k: devices[k] for k in sorted(devices, key=self._rank)}
        log(INFO, "segments: %s on node %d", name, node)
        self.dirty = True

    def _rank(self, name: str) -> tuple[int, str]:
        return self.fleet_order.get(name, len(self.fleet_order)), name

    # ------------------------------------------------------------------ segments
    def _send(self, online: set[int]) -> None:
        if self.plan and self.state["plan"].get("deadline_s") is None:
            return  # the deadline objective trains only once the round has its deadline
        step = None
        if self.s.lockstep:
            if any(lk.msg_id is not None for lk in self.links.values()):
                return  # a step still running: nobody starts the next one
            step = set(logic.due(self.state["devices"]))  # a device ahead waits for the next
            if self.plan:
                self._replan()  # between steps: every device's progress at the same time
        for name, e in self.state["devices"].items():
            lk = self.links.get(name)
            if e["status"] not in logic.ACTIVE or lk is None or lk.node not in online:
                continue
            if lk.msg_id is not None or (step is not None and name not in step):
                continue
            prog = logic.progress(e)
            cfg = wire.segment_config(self._round_config(name, prog), self.s.segment_s, prog)
            content = RecordDict({records.CONFIG: cfg})
            # the weights: once per node and round (a board keeps them in its checkpoint); in
            # federated mode with every segment, since a replay device keeps nothing between
            # segments and sends back what it was given when it finishes
            first_here = lk.weights_to != lk.node or self.mode == "federated"
            if first_here and records.has_weights(self.arrays):
                content[records.ARRAYS] = self.arrays
            msg = Message(
                content=content,
                dst_node_id=lk.node,
                message_type=f"{MessageType.TRAIN}.{wire.SEGMENT}",
                ttl=self._ttl(lk, prog.segments),
            )
            mid = self._push(msg)
            if mid:
                lk.msg_id, lk.sent_at, lk.sent_time_s = mid, time.monotonic(), prog.time_s
                lk.weights_to = lk.node if records.ARRAYS in content else lk.weights_to
                if e["status"] == "pending":
                    e["status"], self.dirty = "running", True

    def _expected_wall(self, lk: Link, segments: int) -> float:
        # wall seconds per device second: learned from its replies; before the first, a paced
        # simulated device's own pace, else one (a board lives its clock)
        per = lk.wall_per_s if lk.wall_per_s is not None else 1.0 / (lk.pace or 1.0)
        first = self.s.first_allowance_s if segments == 0 else 0.0
        return first + self.s.overdue_factor * self.s.segment_s * per + self.s.overdue_slack_s

    def _ttl(self, lk: Link, segments: int) -> float:
        """Flower drops a message after its TTL: never before the work could be done."""
        return max(3600.0, 10.0 * self._expected_wall(lk, segments))

    def _on_segment(self, name: str, lk: Link, msg: Message) -> None:
        if msg.has_error():
            self._on_error(name, lk, msg)
            return
        lk.crashes = 0
        try:
            row = records.decode_reply(
                rc.need(msg.content, records.METRICS, MetricRecord),
                rc.need(msg.content, records.REPORT, ConfigRecord),
            )
            check_row(row, name)
            prog = wire.progress_of(msg.content, name)
        except KeyError:
            self._refuse(name, f"device {name}: reply without metrics/report records")
            return
        except InputError as exc:
            self._refuse(name, str(exc))
            return
        wall, ran = time.monotonic() - lk.sent_at, prog.time_s - lk.sent_time_s
        if ran > 0:
            lk.wall_per_s = (
                wall / ran if lk.wall_per_s is None else 0.5 * (lk.wall_per_s + wall / ran)
            )
        # ``ran``: from the progress this segment was sent with, which is the book's until this
        # reply (one message in flight per device): no second parse of the book's progress
        if row.get("status") == "running" and name in self.state["devices"] and ran <= 0:
            lk.stalls += 1  # a segment that trained nothing (its agent died, its data broke)
            if lk.stalls >= self.s.max_crashes:
                self._refuse(name, f"no progress in {lk.stalls} segments: {row.get('message')}")
                return
        else:
            lk.stalls = 0
        done = book.apply_segment(self.state, name, row, prog)
        self.dirty = True
        if self.on_reply is not None:
            try:
                self.on_reply(msg, row)
            except Exception as exc:  # noqa: BLE001 - a progress display must not stop a round
                log(WARNING, "reply callback failed: %s", exc)
        if done and self.mode == "federated" and row.get("status") in TRAINED:
            arrays = rc.arrays(msg.content, records.ARRAYS)
            if records.has_weights(arrays):
                n = rc.need(msg.content, records.METRICS, MetricRecord).get("num-examples", 0)
                if isinstance(n, (int, float)):  # a list here is no count: no weights from it
                    self.weights[name] = (arrays, float(n))
        if self.plan and not done and not self.s.lockstep:
            self._replan()

    def _on_error(self, name: str, lk: Link, msg: Message) -> None:
        code, reason = msg.error.code, " ".join(str(msg.error.reason).split())
        if code == ErrorCode.NODE_UNAVAILABLE:
            book.mark_lost(self.state, name, f"node {lk.node} went offline")
            lk.node = None
        else:
            lk.crashes += 1
            log(WARNING, "segments: %s failed (%d in a row): %s", name, lk.crashes, reason)
            if lk.crashes >= self.s.max_crashes:
                e = book.entry(self.state, name)
                e["status"], e["message"] = "error", f"failed {lk.crashes} times: {reason}"
                e["row"] = records.error_row(name, e["message"], str(e.get("device_type") or ""))
        self.dirty = True  # anything else: sent again, resuming from its checkpoint

    def _refuse(self, name: str, why: str) -> None:
        log(WARNING, "segments: reply refused: %s", why)
        book.refuse(self.state, name, why)
        self.dirty = True

    def _check_lost(self, online: set[int]) -> None:
        for name, lk in self.links.items():
            e = self.state["devices"].get(name, {})
            if e.get("status") in logic.ACTIVE and lk.node is not None and lk.node not in online:
                book.mark_lost(self.state, name, f"node {lk.node} went offline")
                lk.node, lk.msg_id, self.dirty = None, None, True

    def _check_overdue(self) -> None:
        now = time.monotonic()
        for name, lk in self.links.items():
            e = self.state["devices"].get(name, {})
            if lk.msg_id is None or e.get("status") not in ("running", "overdue"):
                continue
            waited = now - lk.sent_at
            limit = self._expected_wall(lk, int(e["progress"].get("segments") or 0))
            if waited > limit and e["status"] == "running":
                book.mark_overdue(self.state, name, waited)
                self.dirty = True
            if waited > self.s.resend_factor * limit and lk.resends < self.s.max_resends:
                # the message may be lost inside Flower: the segment again, from the book's
                # progress (a device resumes from the later of that and its own checkpoint, so
                # a repeated segment is never counted twice); a late reply to the old one is
                # no longer waited for
                log(
                    WARNING,
                    "segments: %s: no reply in %.0f s from node %s, which is online; "
                    "sending its segment again",
                    name, waited, lk.node,
                )  # fmt: skip
                lk.msg_id, lk.resends = None, lk.resends + 1

    # ------------------------------------------------------------------ plan
    def _round_config(self, name: str, prog: Progress) -> ConfigRecord:
        """The round's instruction with the deadline as this device must read it
        (``round_logic.deadline_for``: scaled to its units when it prices its work with the
        shipped efficiency; the deadline itself stays the fleet's)."""
        if not self.plan:
            return self.config
        deadline = logic.deadline_for(self.state.get("plan"), name, prog, self._shipped)
        return coordinator.with_deadline(self.config, deadline)

    def _plan_deadline(self) -> None:
        """The planning exchange (before anyone trains): the slowest fastest finish."""
        nodes = {lk.node: n for n, lk in self.links.items() if lk.node is not None}
        msgs = [
            Message(
                content=RecordDict({records.CONFIG: ConfigRecord(dict(self.config))}),
                dst_node_id=node,
                message_type=MessageType.QUERY,
            )
            for node in nodes
        ]
        replies = list(self.grid.send_and_receive(msgs, timeout=self.s.first_allowance_s))
        fastest: dict[str, float | None] = {}
        for msg in replies:
            if not msg.has_error():
                device, finish, _ = records.decode_plan(msg.content)
                if device in self.links:
                    fastest[device] = finish
        deadline, notes = coordinator.deadline_from_plans(replies)
        for note in notes:
            log(WARNING, "planning: %s", note)
        self.state["plan"] = logic.new_plan(deadline, fastest, book.utc_now)
        log(INFO, "planning: deadline %s s", deadline)
        self.dirty = True

    def _replan(self) -> None:
        why = logic.replan(self.state.get("plan") or {}, self.state["devices"], self._shipped,
                           book.utc_now)  # fmt: skip
        if why:
            log(INFO, "re-plan: %s", why)

    # ------------------------------------------------------------------ disk
    def _persist(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and (not self.dirty or now - self.last_write < self.write_gap_s):
            return
        wall, cpu = time.perf_counter(), time.thread_time()
        self.files.write(self.state)
        took = time.perf_counter() - wall
        self.timings.written(took, time.thread_time() - cpu)
        self.dirty, self.last_write = False, now
        self.write_gap_s = write_gap(took, self.s.write_every_s, self.s.write_share)


def _line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__

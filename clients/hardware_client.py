"""A hardware node's round: drives a real board through the on-device agent.

``clients.client_app`` hands a node whose config says ``client = "hardware"`` here. One round
on a board: start the agent (``python -m fleet.agent`` under the interpreter the node config
names, e.g. JetPack's Python 3.6), say hello, get a profile (the node config's ``profile`` CSV
when it exists, else the agent profiles the model with the staircase plan under the budget and
writes the CSV there), then the device round (``fleet.rounds.device_round.run_device``: align, check
the device type, select under the budget with the shipped efficiency) on the ``AgentRunner``.
When the agent's hello lists ``train`` and the node config names ``data``, the agent runs the
closed loop on the board (``fleet/agent/loop/closedloop.py``) with the device's whole budget (a
schedule, a fixed budget, or the live ``budget-file``), the profile rows and the shipped
efficiency: it re-selects and re-locks at every budget change and steps the clock down when
the rail runs over; the row gets the measured time, energy and power, every segment and guard
event. Otherwise the choice is only locked and the reply says ``status = "selected"`` with no
time or energy. The agent is shut down (which restores the clocks) or killed on every exit
path.

Weights travel as files beside the agent (``work_dir.TrainFiles``): the received ArrayRecord is
written as a state_dict the agent loads, the fine-tuned one comes back in federated mode, and
the trainer checkpoints beside them so a board that loses power resumes instead of restarting.
The device's ``data`` for a hardware node is a ``.pt`` file of ``{"train": (x, y), "test":
(x, y)}`` tensors on the board.

Node config keys (besides the device's own: device-name, device-type, budget-w, profile...):
``backend`` (default jetson), ``agent-python``, ``agent-timeout-s`` (per long command, default
3600), ``work-dir`` (this node's and its agent's private 0700 directory: the agent reads and
writes only there, so a hardware node's ``data`` and ``budget-file`` lie inside it), and the
chosen backend's own options under their public names (``clients.agent_link.AgentSettings``,
generated from the backend registry: e.g. ``sysfs-root``, ``state-dir``, ``rail``,
``gpu-index``, ``allow-clock-changes``, ``profile-csv``), and ``budget-file`` (a file an operator
or a battery/solar controller rewrites; the board re-reads it every second, and it takes the
place of the fleet's budget).

Segmented rounds (``hardware_segment``): the instruction's ``segment-s`` bounds this call's
training (device seconds); the agent pauses at its next evaluation, restores the clocks and
checkpoints, and the row says ``running`` with counters cumulative since the round began; the
next segment's call finds the same checkpoint (``TrainFiles.for_round``: one stem per device,
run and round) and resumes. A board whose agent was killed meanwhile restores its clocks when
the next agent starts (``JetsonBackend`` reads the saved originals before anything else), then
resumes from the last checkpoint. Every segment reply carries a ``progress`` record
(``segment_args.py``).

This module is the round on the agent (``AgentRunner``, ``run_on_agent``) and the three Flower
entry points (``hardware_round``, ``hardware_segment``, ``hardware_plan``). The profile files are
``board_profile.py``, the work directory and weight files ``work_dir.py``, the ``train``
request and the reply-to-row mapping ``train_exchange.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, RecordDict

from clients import content as rc
from clients import records
from clients.agent_link import AgentError, AgentLink, AgentSettings, ProgressCallback
from clients.board_profile import merge_refreshed, obtain_profile, profile_path_for
from clients.reply_check import check_row
from clients.segment_args import attach_progress, behind_note, progress_of, read_segment
from clients.train_exchange import budget_args, fill_from_train, predict_start, train_extras
from clients.work_dir import TrainFiles, work_dir_for
from fleet.common.errors import InputError
from fleet.config.fleetfile import DeviceSpec, RunSettings
from fleet.core.efficiency import Efficiency
from fleet.core.profile import load_profile
from fleet.method.agent_records import TrainRequest
from fleet.method.selection import scaled_lr
from fleet.rounds.device_round import TRAINED, DeviceResult, Round, run_device
from fleet.rounds.progress import Progress


@dataclass
class AgentRunner:
    """Runner of the device round on a board: the agent's closed loop trains under the budget.

    With ``train`` in the agent's hello and ``data`` in the node config, the agent gets the
    device's whole budget (its schedule, or its fixed budget; and the node config's live
    ``budget-file`` when it names one), the aligned profile rows and the shipped efficiency,
    and runs the closed loop (``fleet/agent/loop/closedloop.py``): it selects, locks, re-selects at
    every budget change and guards the rail; the row takes its measured time, energy and power,
    every segment and every guard event. Otherwise the round's choice is only locked and the
    row says ``selected`` (no time or energy).
    """

    link: AgentLink
    settings: AgentSettings
    commands: frozenset[str] = frozenset()
    files: TrainFiles | None = None
    on_progress: ProgressCallback | None = None
    learning: str | None = None
    truth: Efficiency | None = None
    probes: int = 0  # points measured by ``probe`` this round
    segment_s: float | None = None  # a segment of the round: this call's training seconds
    reply: dict[str, Any] | None = None  # the agent's train reply, once it trained

    def run(self, rnd: Round, res: DeviceResult) -> None:
        try:
            if "train" in self.commands and rnd.spec.data:
                self._train(rnd, res)
            else:
                self._lock_only(rnd, res)
        except (AgentError, OSError) as exc:
            res.status, res.message = "error", " ".join(str(exc).split())

    def _lock_only(self, rnd: Round, res: DeviceResult) -> None:
        choice, run = rnd.first, rnd.run
        lr = scaled_lr(choice.batch_size, run.lr_ref_batch, run.lr_ref, run.optimizer)
        self.link.request("lock", timeout_s=self.settings.timeout_s, freq_mhz=choice.freq_mhz)
        res.status = "selected"
        res.message = f"locked {choice.freq_mhz:g} MHz for batch {choice.batch_size} (lr {lr:.3g})"
        if "train" not in self.commands:
            res.message += (
                "; training on the device needs the trainer: this agent has no 'train' command"
            )
        else:
            res.message += "; no data to train on (the device's node config names no 'data')"

    def probe(self, run: RunSettings, batch_size: int, freq_mhz: float) -> dict[str, Any]:
        """Measure one point on the board (the agent's ``profile`` on that point alone): the
        device round's verify-before-trust and coverage fill (``fleet.trust.gate``) call this."""
        if not run.model:
            raise InputError("probing a point needs the run's model")
        try:
            out = self.link.request(
                "profile",
                timeout_s=self.settings.long_timeout_s,
                on_progress=self.on_progress,
                model=run.model,
                batch_sizes=[int(batch_size)],
                freqs=[float(freq_mhz)],
            )
        except (AgentError, OSError) as exc:
            raise InputError(
                f"probe {batch_size}@{freq_mhz:g}: {' '.join(str(exc).split())}"
            ) from None
        rows = out.get("rows") or []
        if len(rows) != 1:
            raise InputError(
                f"probe {batch_size}@{freq_mhz:g}: the agent returned {len(rows)} rows"
            )
        self.probes += 1
        return dict(rows[0])

    def _train(self, rnd: Round, res: DeviceResult) -> None:
        """The agent's closed-loop ``train``; its reply fills the row (``fill_from_train``)."""
        run = rnd.run
        request = TrainRequest(
            model=run.model,
            lr_ref_batch=run.lr_ref_batch,  # the learning-rate reference pair: the agent scales
            lr_ref=run.lr_ref,
            optimizer=run.optimizer,
            target_accuracy=run.target_accuracy,
            data=rnd.spec.data,
            seed=run.seed,
            segment_s=self.segment_s or None,
            **budget_args(rnd, self.settings),
            **train_extras(run),
            **(self.files.agent_args() if self.files else {}),
        )
        out = self.link.request(
            "train",
            timeout_s=self.settings.long_timeout_s,
            on_progress=self.on_progress,
            **request.args(),
        )
        self.reply = out
        fill_from_train(res, out, run.target_accuracy)
        predict_start(res, rnd)
        refreshed = out.get("refreshed_profile_csv")
        if isinstance(refreshed, str) and refreshed.strip() and rnd.spec.profile:
            merge_refreshed(rnd.spec.profile, refreshed)


def run_on_agent(
    link: AgentLink,
    spec: DeviceSpec,
    ins: records.TrainInstruction,
    settings: AgentSettings,
    on_progress: ProgressCallback | None = None,
    files: TrainFiles | None = None,
    profile_info: dict[str, Any] | None = None,
    segment_s: float | None = None,
    train_reply: dict[str, Any] | None = None,
) -> dict[str, object]:
    """hello -> profile -> the device round on the agent runner; returns the report row.

    ``profile_info`` (filled in): where the profile came from (``origin``), probes measured
    this round, the board's provenance, and ``csv`` when the profile is new or changed.
    ``segment_s``: train one segment of that many seconds (``hardware_segment``);
    ``train_reply`` (filled in): the agent's train reply, when it trained.

    Infeasible budgets and agent failures become the row's status and message, never an
    exception, so one board cannot stop the fleet's round.
    """
    path = profile_path_for(spec, ins, settings)
    info = {} if profile_info is None else profile_info
    try:
        hello = link.request("hello", timeout_s=settings.timeout_s)
        commands = frozenset(hello.get("capabilities", {}).get("commands", []))
        profile = obtain_profile(link, spec, ins, settings, on_progress, info)
    except (AgentError, InputError, OSError) as exc:
        res = DeviceResult.for_device(spec, ins.efficiency_for(spec.name).source, profile=path)
        res.message = " ".join(str(exc).split())
        return res.to_dict()
    before = _read_text(path)
    runner = AgentRunner(link, settings, commands, files, on_progress, segment_s=segment_s)
    row = run_device(spec, profile, ins.efficiency_for(spec.name), ins.run, runner)
    if train_reply is not None and runner.reply is not None:
        train_reply.update(runner.reply)
    row.profile = path
    after = _read_text(path)
    device = hello.get("device")
    board = device if isinstance(device, dict) else {}
    info.update(
        probes=int(info.get("probes") or 0) + runner.probes,
        board_type=spec.device_type,
        l4t=str(board.get("l4t") or ""),
        serial=str(board.get("serial") or ""),
        path=path,
    )
    if after and (info.get("origin") in ("profiled", "sibling") or after != before):
        info["csv"] = after  # new or changed on this board: the coordinator stores it
    if info.get("origin") != "local":  # say where a profile not from this board's file came from
        head = f"profile {info.get('origin')} ({info['probes']} probe(s))"
        row.message = f"{head}; {row.message}" if row.message else head
    if board.get("source") == "virtual":  # the board says so itself (board_identity)
        head = f"source=virtual: a virtual board on host {board.get('host')} (the host's times)"
        row.message = f"{head}; {row.message}" if row.message else head
    return row.to_dict()


def _instruction_for(
    node_config: dict, content: RecordDict
) -> tuple[records.TrainInstruction, DeviceSpec, AgentSettings]:
    """The message's instruction, this board's fleet entry and its agent settings (KeyError:
    the message has no instruction; InputError: the node config or fleet is wrong)."""
    ins = records.decode_instruction(rc.need(content, records.CONFIG, ConfigRecord))
    spec = records.device_spec_for(node_config, ins.fleet_path)
    return ins, spec, AgentSettings.from_node_config(node_config)


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def hardware_round(node_config: dict, content: RecordDict) -> RecordDict:
    """One round on this board, from the node config and the instruction, as reply content."""
    row, files, info, mode = _board_round(node_config, content)
    return _reply(row, files, info, mode)


def hardware_segment(node_config: dict, content: RecordDict) -> RecordDict:
    """One segment of a round on this board (the ``train.segment`` message), as reply content.

    The instruction's ``segment-s`` bounds this call's training (absent or 0: the whole run);
    the row is the round's so far (status ``running`` until a final one: ok, late, not
    reached, over-budget, error), and the reply adds the ``progress`` record, the board's own
    view (``segment_args.progress_of``), or the coordinator's ``resume`` unchanged when the
    board could not even start.
    """
    label = records.node_label(node_config)
    try:
        seg = read_segment(rc.need(content, records.CONFIG, ConfigRecord))
    except KeyError:
        return records.reply_content(records.error_row(label, "no train instruction"))
    except InputError as exc:
        return records.reply_content(records.error_row(label, str(exc)))
    reply: dict[str, Any] = {}
    content = _deadline_from_here(content, seg.resume)
    row, files, info, mode = _board_round(node_config, content, seg.segment_s, reply)
    if info.pop(AGENT_DIED, False) and seg.segment_s is not None:
        # the agent died mid-segment: its checkpoint holds the work; the next segment resumes it
        # (the coordinator gives up on a device that makes no progress in several segments)
        row = dict(row, status="running")
        row["message"] = f"segment lost, resuming from the board's checkpoint: {row['message']}"
        return attach_progress(_reply(row, None, info, mode), seg.resume or Progress())
    try:
        if reply:
            progress = progress_of(reply, row)
            note = behind_note(seg.resume, reply)
            if note:
                row["message"] = f"{row['message']}; {note}" if row.get("message") else note
        else:  # nothing trained this call: the last known progress stands
            progress = seg.resume if seg.resume is not None else progress_of(None, row)
    except InputError:
        # the agent's numbers are beyond any bound (1e308 J): ``_reply`` refuses its row with
        # the field named; the progress stays where the coordinator last saw it
        progress = seg.resume or Progress()
    return attach_progress(_reply(row, files, info, mode), progress)


def _deadline_from_here(content: RecordDict, resume: Progress | None) -> RecordDict:
    """The instruction with the deadline as the board's closed loop reads it.

    The coordinator's ``deadline_s`` is on the round's device clock; the board's deadline
    objective times each call from its own start (``fleet/method/deadline.py``), so a segment
    that resumes at ``t`` of training gets ``deadline - t`` (at least 1 s: a board past the
    deadline runs its fastest point and reports ``late``)."""
    cfg = rc.config(content, records.CONFIG)
    if resume is None or resume.time_s <= 0 or cfg is None:
        return content
    try:
        more = json.loads(str(cfg.get(records.RUN_SETTINGS, "{}")))
    except ValueError:
        return content  # decode_instruction will name it
    deadline = more.get("deadline_s") if isinstance(more, dict) else None
    if isinstance(deadline, bool) or not isinstance(deadline, (int, float)):
        return content
    more["deadline_s"] = max(1.0, float(deadline) - resume.time_s)
    out = RecordDict(dict(content.items()))
    out[records.CONFIG] = ConfigRecord({**cfg, records.RUN_SETTINGS: json.dumps(more)})
    return out


def _board_round(
    node_config: dict,
    content: RecordDict,
    segment_s: float | None = None,
    train_reply: dict[str, Any] | None = None,
) -> tuple[dict, TrainFiles | None, dict[str, Any], str]:
    """The round (or one segment of it) on the agent: (row, files, profile info, run mode)."""
    label = records.node_label(node_config)
    try:
        ins, spec, settings = _instruction_for(node_config, content)
        settings = replace(settings, work_dir=str(work_dir_for(settings)))  # the agent's too
    except KeyError:
        return records.error_row(label, "no train instruction"), None, {}, ""
    except InputError as exc:
        return records.error_row(label, str(exc)), None, {}, ""
    arrays = rc.arrays(content, records.ARRAYS)
    files = TrainFiles.for_round(settings, spec, ins, arrays, keep_weights=segment_s is not None)
    link = AgentLink(settings.argv(), timeout_s=settings.timeout_s)
    info: dict[str, Any] = {}
    died = False
    try:
        link.start()
        row = run_on_agent(
            link, spec, ins, settings, files=files, profile_info=info, segment_s=segment_s,
            train_reply=train_reply,
        )  # fmt: skip
        died = link.proc is not None and link.proc.poll() is not None
    except AgentError as exc:
        row = records.error_row(spec.name, str(exc), spec.device_type)
        died = link.proc is not None and link.proc.poll() is not None
    finally:
        link.close()
    if died:
        row["message"] = (
            f"{row.get('message') or 'the agent died'}; {restore_after_crash(settings)}"
        )
        info[AGENT_DIED] = True
    return row, files, info, ins.run.mode


AGENT_DIED = "agent-died"  # profile-info flag (never sent): the agent process ended mid-round


def restore_after_crash(settings: AgentSettings) -> str:
    """A fresh agent's ``hello`` on a board whose agent died (killed, out of memory) with its
    clock locked: a new agent restores the clocks a dead holder saved before anything else
    (``fleet/agent/devices/clockstate.py``). Returns what happened, for the row's message:
    no clock stays pinned because one round went wrong."""
    link = AgentLink(settings.argv(), timeout_s=settings.timeout_s)
    try:
        link.start()
        link.request("hello", timeout_s=settings.timeout_s)
        return "a fresh agent restored the board's saved clocks"
    except (AgentError, OSError) as exc:
        return f"restoring the clocks failed too: {' '.join(str(exc).split())[:200]}"
    finally:
        link.close()


def _reply(row: dict, files: TrainFiles | None, info: dict[str, Any], mode: str) -> RecordDict:
    """The reply content: the row, the trained weights (federated, trained), the profile.

    The row is checked first (``reply_check.check_row``): an agent that answered NaN, negative
    or absurd numbers, a sample count as text, an unknown status or a megabyte of message
    makes the row ``error`` naming the field, and nothing it said travels on."""
    try:
        check_row(row, str(row.get("device")))
    except InputError as exc:
        row = records.error_row(
            str(row.get("device")), f"agent reply refused: {exc}", str(row.get("device_type"))
        )
    send = files is not None and mode == "federated" and row.get("status") in TRAINED
    weights: ArrayRecord | None = files.trained() if send and files is not None else None
    content = records.reply_content(row, weights)
    csv_text = info.pop("csv", None)
    if csv_text:
        records.attach_profile(content, csv_text, info)
    return content


def hardware_plan(node_config: dict, content: RecordDict) -> RecordDict:
    """The planning exchange on a board: its fastest predicted finish from its profile (the
    node config's CSV; measured by the agent first when there is none yet, as the round would),
    without training."""
    from fleet.planning.deadline_plan import plan_for_device

    label = records.node_label(node_config)
    try:
        ins, spec, settings = _instruction_for(node_config, content)
    except KeyError:
        return records.plan_content(label, None, message="no instruction to plan")
    except InputError as exc:
        return records.plan_content(label, None, message=str(exc))
    try:
        path = profile_path_for(spec, ins, settings)
        if Path(path).is_file():
            profile = load_profile(path)
        else:
            link = AgentLink(settings.argv(), timeout_s=settings.timeout_s)
            try:
                link.start()
                profile = obtain_profile(link, spec, ins, settings)
            finally:
                link.close()
    except (AgentError, InputError, OSError) as exc:
        return records.plan_content(spec.name, None, message=" ".join(str(exc).split()))
    plan = plan_for_device(spec, profile, ins.efficiency_for(spec.name))
    return records.plan_content(spec.name, plan.fastest_finish_s, plan.energy_j, plan.message)

"""Segmented training on a board: the agent's ``train`` with ``segment_s`` on a virtual Nano.

A round that lasts hours runs in bounded segments: each call trains at least ``segment_s``
seconds of the device's clock (paced: every step lasts the profile's step time, so the board's
timeline, not this CPU's speed), pauses at its next evaluation, restores the clocks and replies
``paused`` with the run's cumulative counters; the next call resumes from the checkpoint. The
agent runs as a real ``python -m fleet.agent --backend jetson`` subprocess on the virtual
Jetson's sysfs tree (its kernel stand-in in another process, which survives an agent's
SIGKILL). Verdicts come from the device clock and the files, never from how fast this machine
trains.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import pytest
from flwr.app import RecordDict

from clients import records
from clients.agent_link import AgentError, AgentLink, AgentSettings
from clients.hardware_client import hardware_segment
from clients.segment_args import PROGRESS, read_segment
from fleet.agent.data import tensorfile
from fleet.agent.devices import clockstate
from fleet.common.errors import InputError
from fleet.config.fleetfile import RunSettings
from fleet.core.efficiency import Efficiency
from fleet.method import liveness
from fleet.rounds.progress import Progress
from simulations.virtual_jetson import build_board, wait_for
from tests.hardware_helpers import BATCH, STEP_TOP_S, board_profile, tiny_pt_data

N_TARGET = 4000.0  # the shipped samples-to-accuracy at b=16 (the progress's done and eta)
EVERY = 160  # an evaluation every 10 steps: 0.2 s of the paced device clock at 921.6 MHz
SEGMENT_S = 0.5


def _board(tmp_path: Path):
    """A virtual Nano under a 5 W budget (it runs 921.6 MHz, 0.02 s a step of 16), its
    profile and data in the agent's work dir (tmp_path), and the agent's settings."""
    board = build_board(tmp_path / "board", "nano", workload="small_cnn")
    board.set_load(BATCH)
    prof = board_profile(board, tmp_path / "profile.csv")
    data = tiny_pt_data(tmp_path / "data.pt")
    settings = AgentSettings(
        backend="jetson",
        options={"sysfs_root": str(board.root), "state_dir": str(tmp_path / "state")},
        timeout_s=60,
        long_timeout_s=300,
        work_dir=str(tmp_path),
    )
    return board, prof, data, settings


def _train_args(prof: Path, data: Path, ckpt: Path, max_samples: int, **extra) -> dict:
    """The agent's closed-loop ``train`` on small_cnn towards an unreachable target (1.0 on
    noise): the run ends at ``max_samples``, in segments of ``SEGMENT_S``. No drift watch: a
    loaded host's slow step must not add re-probe segments to the record asserted here."""
    args = dict(
        model="small_cnn", lr_ref_batch=BATCH, lr_ref=1e-3, target_accuracy=1.0, data=str(data),
        seed=0, budget_w=5.0, profile=str(prof), efficiency={str(BATCH): N_TARGET}, pace=True,
        max_samples=max_samples, eval_every_samples=EVERY, checkpoint=str(ckpt),
        segment_s=SEGMENT_S, drift=False,
    )  # fmt: skip
    args.update(extra)
    return {k: v for k, v in args.items() if v is not None}


def _link(settings: AgentSettings) -> AgentLink:
    return AgentLink(settings.argv(), timeout_s=60)


def _checkpoint_counters(path: Path) -> dict:
    return tensorfile.load(str(path), "checkpoint")["counters"]


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_run_in_segments_counts_every_sample_once_and_equals_the_whole_run(tmp_path):
    board, prof, data, settings = _board(tmp_path)
    original = board.bounds()
    ckpt = tmp_path / "seg.ckpt"
    replies, saved = [], []
    with board.kernel(process=True, lag_s=0.02), _link(settings) as link:
        # a segment without a checkpoint to pause into is refused up front, in one line
        with pytest.raises(AgentError, match="'segment_s' needs 'checkpoint'"):
            link.request("train", **_train_args(prof, data, ckpt, 1600, checkpoint=None))
        for _ in range(20):  # every call is one segment; the run needs at least 2 s of it
            out = link.request("train", timeout_s=300, **_train_args(prof, data, ckpt, 1600))
            replies.append(out)
            saved.append(_checkpoint_counters(ckpt)["samples"])
            assert board.bounds() == original  # restored after every segment
            if out["status"] != "paused":
                break
        whole = link.request(
            "train",
            timeout_s=300,
            **_train_args(prof, data, tmp_path / "whole.ckpt", 1600, segment_s=None),
        )
    paused, final = replies[:-1], replies[-1]
    assert len(paused) >= 2 and all(r["status"] == "paused" for r in paused)
    assert final["status"] == "not reached" and final["samples"] == 1600
    prev_t, prev_n = 0.0, 0
    for k, r in enumerate(paused, start=1):
        # the counters are the run's: they only grow, each segment trained at least
        # segment_s of the device clock, and stopped at an evaluation (the checkpoint's)
        assert r["samples"] > prev_n and r["samples"] % EVERY == 0
        assert r["time_s"] - prev_t >= SEGMENT_S
        assert r["curve"][-1][0] == r["samples"] and r["sessions"] == k
        assert r["resumed_from_samples"] == (prev_n if k > 1 else None)
        assert saved[k - 1] == r["samples"]  # the checkpoint the next segment resumes
        prev_t, prev_n = r["time_s"], r["samples"]
        # where the run stands: the point, budget and power now, and how far along, priced on
        # the shipped efficiency and the profile's step time at the running point
        p = Progress.from_dict(r["progress"])
        assert (p.samples, p.time_s, p.segments) == (r["samples"], r["time_s"], k)
        assert (p.end_batch_size, p.end_freq_mhz, p.budget_w) == (BATCH, 921.6, 5.0)
        assert p.power_w is not None and 0 < p.power_w <= 5.0 * 1.05
        assert p.done == pytest.approx(r["samples"] / N_TARGET)
        assert p.eta_s == pytest.approx((N_TARGET - r["samples"]) / BATCH * STEP_TOP_S)
        assert p.accuracy == r["accuracy"] and p.energy_j == pytest.approx(r["energy_j"])
    assert final["time_s"] > prev_t and final["progress"]["segments"] == len(replies)
    # no sample counted twice or skipped: one evaluation per 160 samples across all the
    # segments, and the segmented run is the whole run (exact resume under a fixed budget)
    assert [s for s, _ in final["curve"]] == list(range(0, 1601, EVERY))
    assert final["steps"] * BATCH == final["samples"] == whole["samples"]
    assert final["curve"] == whole["curve"]
    # the loop's record is the run's: one segment per call on one timeline
    segs = final["segments"]
    assert [s["reason"] for s in segs] == ["start"] + ["resume"] * (len(replies) - 1)
    assert all(a["end_s"] <= b["start_s"] for a, b in zip(segs, segs[1:], strict=False))
    assert final["loop_time_s"] >= sum(s["end_s"] - s["start_s"] for s in segs) - 1e-9
    assert board.bounds() == original
    assert not (tmp_path / "state" / clockstate.STATE_FILE).exists()


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_segment_killed_while_locked_restores_first_and_resumes(tmp_path):
    """SIGKILL mid-segment leaves the GPU pinned and the saved originals behind; the next
    segment's agent puts the originals back before anything else (its hello already finds
    them), then resumes from the last checkpoint."""
    board, prof, data, settings = _board(tmp_path)
    original = board.bounds()
    ckpt = tmp_path / "seg.ckpt"
    state_file = tmp_path / "state" / clockstate.STATE_FILE
    with board.kernel(process=True, lag_s=0.02):
        link = _link(settings).start()
        got: list = []
        worker = threading.Thread(
            target=lambda: got.append(_try(link, _train_args(prof, data, ckpt, 100000))),
            daemon=True,
        )
        worker.start()
        try:
            # a checkpoint past the first evaluations, and the clock pinned: kill it now
            assert wait_for(
                lambda: ckpt.is_file() and _checkpoint_counters(ckpt)["samples"] >= 2 * EVERY,
                timeout_s=240,
                period_s=0.1,
            ), link.stderr_tail()
            locked = board.bounds()
            assert locked["min_freq"] == locked["max_freq"] and locked != original
            killed_pid = link.proc.pid
            os.kill(killed_pid, signal.SIGKILL)
        finally:
            link.close()  # reaps it
            worker.join(timeout=30)
        assert got and isinstance(got[0], AgentError)  # no reply from a killed agent
        at_kill = _checkpoint_counters(ckpt)
        assert board.bounds() == locked  # nothing ran an exit path: still pinned
        saved = json.loads(state_file.read_text())
        assert saved["pid"] == killed_pid
        assert (saved["min_freq"], saved["max_freq"]) == (
            original["min_freq"],
            original["max_freq"],
        )

        with _link(settings) as link2:
            hello = link2.request("hello")
            # before any command: the stale originals are back and their file consumed
            assert board.bounds() == original and not state_file.exists()
            assert "restored GPU clocks" in link2.stderr_tail()
            assert hello["ok"]
            out = link2.request("train", timeout_s=300, **_train_args(prof, data, ckpt, 100000))
            resumed_at = out["resumed_from_samples"]
        after = board.bounds()
    assert resumed_at == at_kill["samples"] >= 2 * EVERY
    assert out["status"] == "paused" and out["samples"] > resumed_at
    assert out["sessions"] == at_kill["sessions"] + 1
    assert out["time_s"] - at_kill["train_time_s"] >= SEGMENT_S
    assert out["curve"][: len(at_kill["curve"])] == [list(p) for p in at_kill["curve"]]
    assert after == original and not state_file.exists()


def _try(link: AgentLink, args: dict):
    try:
        return link.request("train", timeout_s=300, **dict(args, segment_s=3600.0))
    except AgentError as exc:
        return exc


def _segment_content(ins: records.TrainInstruction, segment_s: float, resume: str | None):
    cfg = records.encode_instruction(ins)
    cfg["segment-s"] = segment_s
    if resume is not None:
        cfg["resume"] = resume
    return RecordDict({records.CONFIG: cfg})


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_hardware_segment_runs_a_round_in_segments_through_the_agent(tmp_path):
    board, prof, data, settings = _board(tmp_path)
    original = board.bounds()
    nc = {
        "device-name": "nano-1",
        "device-type": "jetson-nano",
        "budget-w": "5",
        "profile": str(prof),
        "data": str(data),
        "backend": "jetson",
        "sysfs-root": str(board.root),
        "state-dir": str(tmp_path / "state"),
        "work-dir": str(tmp_path),
        "pace-to-profile": "true",
    }
    run = RunSettings(
        "hw", "small_cnn", "eff.csv", 1.0, lr_ref_batch=BATCH, lr_ref=1e-3,
        max_samples=640, eval_every_samples=EVERY,
    )  # fmt: skip
    ins = records.TrainInstruction(Efficiency({BATCH: N_TARGET}, source="eff.csv"), run)
    rows, progress = [], []
    resume = None
    with board.kernel(process=True, lag_s=0.02):
        for _ in range(10):
            reply = hardware_segment(nc, _segment_content(ins, SEGMENT_S, resume))
            row = records.decode_reply(
                reply.metric_records[records.METRICS], reply.config_records[records.REPORT]
            )
            text = str(reply.config_records[PROGRESS][PROGRESS])
            rows.append(row)
            progress.append(Progress.from_dict(json.loads(text)))
            assert board.bounds() == original  # every segment gives the clocks back
            resume = text  # the coordinator sends back what it last saw
            if row["status"] != "running":
                break
    assert len(rows) >= 2 and all(r["status"] == "running" for r in rows[:-1])
    assert rows[-1]["status"] == "not reached" and rows[-1]["samples"] == 640
    # the second call resumed the first's checkpoint: one more segment, counters carried on
    assert [p.segments for p in progress] == list(range(1, len(rows) + 1))
    assert all(
        a.samples < b.samples and a.time_s < b.time_s
        for a, b in zip(progress, progress[1:], strict=False)
    )
    assert [p.samples for p in progress] == [r["samples"] for r in rows]
    assert all(r["time_s"] == p.time_s for r, p in zip(rows, progress, strict=True))
    assert progress[0].time_s >= SEGMENT_S and progress[0].end_freq_mhz == 921.6
    assert "resumes from the checkpoint" in str(rows[0]["message"])
    # one checkpoint for every segment of the round: the device's, run's and round's stem
    assert (tmp_path / f"nano-1_hw_r{ins.server_round}.ckpt").is_file()
    # the row's loop segments are the round's: one per call, on one timeline
    firsts = [s["reason"] for s in rows[-1]["segments"] if s["reason"] in ("start", "resume")]
    assert firsts == ["start"] + ["resume"] * (len(rows) - 1)


def test_segment_keys_are_read_and_bad_ones_named():
    ins = records.TrainInstruction(
        Efficiency({BATCH: N_TARGET}, source="eff.csv"), RunSettings("hw", "small_cnn", "e", 0.9)
    )
    cfg = _segment_content(ins, 2.5, json.dumps({"samples": 320.0, "time_s": 1.0})).config_records
    got = read_segment(cfg[records.CONFIG])
    assert got.segment_s == 2.5 and (got.resume.samples, got.resume.time_s) == (320.0, 1.0)
    assert read_segment(records.encode_instruction(ins)).segment_s is None  # a whole run
    for bad, word in ((-1.0, "segment-s"), (float("nan"), "segment-s")):
        with pytest.raises(InputError, match=word):
            read_segment(_segment_content(ins, bad, None).config_records[records.CONFIG])
    broken = _segment_content(ins, 1.0, '{"samples": -5}').config_records[records.CONFIG]
    with pytest.raises(InputError, match="resume: progress field .samples."):
        read_segment(broken)
    # a bad key is the reply's error row, never an exception in the ClientApp
    reply = hardware_segment({"device-name": "nano-9"}, _segment_content(ins, -1.0, None))
    report = reply.config_records[records.REPORT]
    assert report["status"] == "error" and "segment-s" in str(report["message"])


def test_a_killed_holder_not_yet_reaped_holds_no_clocks():
    """An agent SIGKILLed whose parent has not waited for it yet is a zombie: its /proc entry
    (and start time) remain, but it has exited, so its saved clocks are a dead run's, which the
    next start restores, not a live holder's it must leave alone."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        record = liveness.process_identity(proc.pid)
        assert liveness.holder(record) == "alive"
        os.kill(proc.pid, signal.SIGKILL)
        assert wait_for(lambda: liveness.holder(record) == "gone", timeout_s=30)
        assert Path(f"/proc/{proc.pid}/stat").exists()  # not reaped yet: a zombie
    finally:
        proc.kill()
        proc.wait()

"""The closed loop on a board whose power follows the locked clock (tests/closedloop_helpers.py).

Real training (small_cnn on tiny generated data) under a real sampler thread; an ``augment``
hook that sleeps makes each step take a board-like 15 ms, so the run spans the schedule steps
and drift injections. Those runs assert what happened and in which order, never how soon on the
host's clock: a loaded machine delays a thread by any amount. When the loop acts is asserted on
its own clock (``FakeClock``), readings and steps placed by the test.
"""

import os
import random
import time

import pytest
import torch

from fleet.agent.loop.closedloop import STATUS_OVER_BUDGET, ClosedLoop
from fleet.agent.loop.loop_plan import LoopHooks, LoopPlan
from fleet.agent.models.registry import build_model
from fleet.method.budget import (
    BudgetError,
    FileBudget,
    FixedBudget,
    ScheduleBudget,
    make_source,
    parse_schedule,
)
from fleet.method.selection import choose, lut_from_rows
from tests.closedloop_helpers import (
    EFF,
    FREQS,
    FakeClock,
    FollowBackend,
    at_step,
    lut_rows,
    model_power,
    slow_step,
    under_budget,
)


def make_data(n, seed):
    g = torch.Generator()
    g.manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=g)
    x = torch.randn(n, 1, 8, 8, generator=g)
    return x, y


TRAIN, TEST = make_data(512, 1), make_data(128, 2)


def run_loop(backend, source, max_samples, checkpoint=None, augment=slow_step, **kw):
    model = build_model("small_cnn", num_classes=2, input_shape="1x8x8", seed=0, width=4)
    return under_budget(
        backend, model, TRAIN, TEST, lut_from_rows(lut_rows()), EFF, source, 16, 1e-3,
        target_accuracy=1.0, max_samples=max_samples, eval_every_samples=256,
        augment=augment, checkpoint_path=checkpoint, **kw
    )  # fmt: skip


# ------------------------------------------------------------------------------ selection


def test_board_lut_and_host_profile_are_the_same_points(tmp_path):
    """One point type: the board's LUT (``lut_from_rows``) and the host's loaded profile read
    the same CSV into equal ``Point``s, predicted bounds included, so both sides choose alike."""
    from fleet.core.profile import load_profile
    from fleet.method.profile_io import read_rows, write_rows

    rng = random.Random(7)
    for case in range(30):
        rows = []
        for b in rng.sample([4, 8, 16, 32, 64, 128], rng.randint(1, 6)):
            for f in rng.sample([76.8, 307.2, 460.8, 921.6], rng.randint(1, 4)):
                peak = round(rng.uniform(1.0, 10.0), 3)
                mean = round(peak * rng.uniform(0.6, 1), 3)
                t = round(rng.uniform(0.01, 1.0), 6)
                row = {"batch_size": b, "freq_mhz": f, "time_per_batch_s": t,
                       "peak_power_w": peak, "mean_power_w": mean}  # fmt: skip
                if rng.random() < 0.3:
                    row["peak_power_bound_w"] = round(peak * 1.05, 3)
                rows.append(row)
        path = str(tmp_path / f"p{case}.csv")
        write_rows(path, rows, [])
        lut = lut_from_rows([r for _, r in read_rows(path)[1]], path)
        host = load_profile(path).points

        def plain(points):
            return [tuple(None if v != v else v for v in p) for p in points]

        assert plain(lut) == plain(host)
        assert [type(p) for p in lut] == [type(p) for p in host]
        assert [p.guard_peak_w for p in lut] == [p.guard_peak_w for p in host]


def test_chooser_skips_excluded_points():
    lut = lut_from_rows(lut_rows())
    assert (choose(lut, EFF, 6.0).batch_size, choose(lut, EFF, 6.0).freq_mhz) == (32, 800.0)
    p = choose(lut, EFF, 6.0, exclude={(32, 800.0)})
    assert (p.batch_size, p.freq_mhz) == (16, 800.0)
    assert choose(lut, EFF, 1.0) is None


# ------------------------------------------------------------------------------ budgets


def test_schedule_parsing_and_errors():
    assert parse_schedule("0:7,600:4.5") == ((0.0, 7.0), (600.0, 4.5))
    assert parse_schedule("0:none, 10:3")[0] == (0.0, None)
    s = ScheduleBudget(parse_schedule("0:7,600:4.5,900:none"))
    assert [s.budget_at(t) for t in (0, 599.9, 600, 899, 1e6)] == [7.0, 7.0, 4.5, 4.5, None]
    for bad, words in (
        ("0:7,600:4.5,300:3", "times must strictly increase"),
        ("0:7,-5:3", ">= 0"),
        ("5:7", "start at 0"),
        ("0:seven", "not a budget"),
        ("0:7,600", "SECONDS:WATTS"),
    ):
        with pytest.raises(BudgetError, match=words):
            parse_schedule(bad)


def test_budget_file_garbage_keeps_last_good_and_warns_once(tmp_path):
    path = tmp_path / "budget"
    path.write_text("5.5\n")
    now = [0.0]
    warnings = []
    src = FileBudget(str(path), warn=warnings.append, clock=lambda: now[0])
    assert src.budget_at(0) == 5.5
    path.write_text("4\n")
    assert src.budget_at(0) == 5.5  # not re-read within the second
    now[0] = 1.0
    assert src.budget_at(1) == 4.0
    for text in ("garbage", "-3", "", "nan W"):
        path.write_text(text)
        now[0] += 1.0
        assert src.budget_at(now[0]) == 4.0
    assert len(warnings) == 1 and "keeping 4 W" in warnings[0] and str(path) in warnings[0]
    os.remove(str(path))
    now[0] += 1.0
    assert src.budget_at(now[0]) == 4.0 and len(warnings) == 1
    path.write_text("none")
    now[0] += 1.0
    assert src.budget_at(now[0]) is None
    path.write_text("x")
    now[0] += 1.0
    assert src.budget_at(now[0]) is None and len(warnings) == 2  # a new bad spell warns again
    with pytest.raises(BudgetError, match="not a budget"):
        path.write_text("junk")
        FileBudget(str(path))
    with pytest.raises(BudgetError, match="exactly one"):
        make_source("5", "0:5", None)


@pytest.mark.slow
def test_budget_file_drives_the_loop(tmp_path):
    path = tmp_path / "budget"
    path.write_text("6\n")
    backend = FollowBackend()
    written = []
    steps = [0]

    def controller_at_step_20(x, gen):
        # paced by training, not the wall clock: 130 more steps of >= 15 ms outlast the 1 s
        # re-read on any host (a slower one only makes them longer)
        steps[0] += 1
        if steps[0] == 20:  # as a controller should: write aside, then rename over
            (tmp_path / "budget.new").write_text("3.2\n")
            os.replace(str(tmp_path / "budget.new"), str(path))
            written.append(time.monotonic())
        return slow_step(x, gen)

    source = make_source(budget_file=str(path))
    result, summary = run_loop(backend, source, 4800, augment=controller_at_step_20)
    assert summary["segments"][0]["budget_w"] == 6.0
    assert any(s["budget_w"] == 3.2 for s in summary["segments"])
    # The clock came down after the write, never before it (the re-read period is the source's,
    # on a fake clock above; how soon a thread runs is the host's) ...
    lowered = [w for w, f in backend.lock_log if f < 800.0]
    assert lowered and lowered[0] > written[0]
    # ... and the run ends at the 3.2 W choice, (16, 400 MHz).
    assert (summary["batch_size"], summary["freq_mhz"]) == (16, 400.0)
    assert backend.locked is None and backend.restores >= 1


# ------------------------------------------------------------------------------ the loop


@pytest.mark.slow
def test_schedule_lowers_the_clock_at_the_step():
    backend = FollowBackend()
    began = []  # when each step's batch was drawn (after its before_step)

    def logged_step(x, gen):
        began.append(time.monotonic())
        return slow_step(x, gen)

    schedule = ScheduleBudget(parse_schedule("0:6,1.5:4.2"))
    # 6,400 samples: >= 200 steps of >= 15 ms, past the 1.5 s step however fast the host
    result, summary = run_loop(backend, schedule, 6400, augment=logged_step)
    assert result.samples >= 6400
    # 800 MHz (b=32) until the step, then 400 MHz (b=32's fastest under 4.2 W) until the step
    # boundary, where b=16 starts at 600 MHz and runs to the end.
    assert [f for _, f in backend.lock_log] == [800.0, 400.0, 600.0]
    _start, down, up = [w for w, _f in backend.lock_log]
    # the switch waited for the boundary, and no more than that: at most the step in progress
    # when the change was read began in between
    assert len([t for t in began if down < t < up]) <= 1
    segs = summary["segments"]
    change = next(s for s in segs if s["reason"] == "budget-change")
    assert change["start_s"] >= 1.5 and change["freq_mhz"] == 400.0  # never before the step
    assert (segs[0]["batch_size"], segs[0]["freq_mhz"], segs[0]["reason"]) == (32, 800.0, "start")
    last = segs[-1]
    assert (last["batch_size"], last["freq_mhz"], last["budget_w"]) == (16, 600.0, 4.2)
    assert any(s["reason"] == "budget-change" for s in segs)
    assert summary["guard_events"] == []
    # After the switch nothing ran over the new budget for long: the guard never fired.
    assert backend.locked is None and backend.restores >= 1


@pytest.mark.slow
def test_guard_steps_down_once_and_never_reselects(tmp_path):
    backend = FollowBackend()
    path = tmp_path / "budget"
    path.write_text("6\n")
    drift_at, steps = [None], [0]

    def drift_then_raise(x, gen):
        # paced by training, not the wall clock: at step 10 the rail runs 0.5 W hot (32 @ 800
        # MHz: 5.8 + 0.5 W > 6 W); once the guard has stepped down, the budget rises to 7 W,
        # where the excluded (32, 800) would win again. 8,000 samples: >= 250 steps of >= 15 ms,
        # so the run outlasts the 1 s re-read after the rise on any host
        steps[0] += 1
        if steps[0] == 10:
            drift_at[0] = time.monotonic()
            backend.drift_w = 0.5
        if any(f == 600.0 for _, f in backend.lock_log) and path.read_text() == "6\n":
            (tmp_path / "budget.new").write_text("7\n")
            os.replace(str(tmp_path / "budget.new"), str(path))
        return slow_step(x, gen)

    source = make_source(budget_file=str(path))
    result, summary = run_loop(backend, source, 8000, augment=drift_then_raise)
    events = summary["guard_events"]
    assert len(events) == 1
    ev = events[0]
    assert (ev["from_mhz"], ev["to_mhz"], ev["budget_w"]) == (800.0, 600.0, 6.0)
    assert ev["measured_w"] == pytest.approx(model_power(32, 800.0) + 0.5)
    stepped = min(w for w, f in backend.lock_log if f == 600.0)
    assert stepped > drift_at[0]  # how soon is the guard's window on the readings' clock
    assert [32, 800.0] in summary["infeasible"]
    after = [s for s in summary["segments"] if s["start_s"] >= ev["t_s"] - 1e-9]
    assert after[0]["reason"] == "guard" and after[0]["start_s"] == ev["t_s"]
    assert not any((s["batch_size"], s["freq_mhz"]) == (32, 800.0) for s in after)
    assert any(s["budget_w"] == 7.0 for s in after)
    assert (after[-1]["batch_size"], after[-1]["freq_mhz"]) == (16, 800.0)
    # the rail was over the budget until the guard acted: the run says how long and how much,
    # and is not a clean result (the trainer's own verdict stays "not reached")
    assert result.status == "not reached" and summary["status"] == "over-budget"
    assert summary["over_budget_s"] >= 0.2 - 0.06  # the guard's window: over for longer
    assert summary["over_budget_j"] == pytest.approx(
        summary["over_budget_s"] * (model_power(32, 800.0) + 0.5 - 6.0), rel=0.35
    )
    assert any(n.startswith("over budget: ") for n in summary["notes"])


def test_guard_reacts_during_a_long_step():
    """The sampler's thread guards the rail on its own: a step that never ends (the trainer
    does not call back) is stepped down all the same."""
    backend = FollowBackend()
    src = FixedBudget(6.0)
    loop = ClosedLoop(backend, LoopPlan(lut_from_rows(lut_rows()), EFF, src))
    with loop:
        assert loop.before_step() == (32, False)
        backend.drift_w = 0.5
        t = time.monotonic()
        while time.monotonic() - t < 60.0 and not loop.guard_events:  # a hang guard
            time.sleep(0.01)  # the "step": the trainer does not call back meanwhile
        assert backend.locked == 600.0 and loop.freq_mhz == 600.0
    (ev,) = loop.guard_events
    assert (ev["from_mhz"], ev["to_mhz"], ev["batch_size"]) == (800.0, 600.0, 32)
    assert backend.locked is None


def test_on_the_loops_clock_a_schedule_step_and_the_guard_act_at_the_first_reading_due():
    """The timing the threaded runs leave to the host, on the loop's own clock: steps of 16 ms,
    a reading every 60 ms (the test's, the sampler thread stopped at 0 s), 6 W then 4.2 W from
    1.5 s, the rail 0.5 W hotter from 3.01 s. The reading at 1.50 s lowers the clock to b=32's
    fastest under 4.2 W (400 MHz) at once; the step boundary at 1.504 s switches to b=16 at
    600 MHz; the guard (0.2 s window, 0.1 s settling) steps down at the first reading more than
    0.2 s after the first one over: 3.06 s over, 3.30 s acts. Every time is exact."""
    clock = FakeClock()
    backend = FollowBackend()
    schedule = ScheduleBudget(parse_schedule("0:6,1.5:4.2"))
    plan = LoopPlan(lut_from_rows(lut_rows()), EFF, schedule, guard_window_s=0.2)
    hooks = LoopHooks(hz=0.001, clock=clock, sleep=clock.sleep, settle_s=0.1)
    with ClosedLoop(backend, plan, hooks=hooks) as loop:
        loop.sampler.stop()  # its one reading, if any, at 0 s: the test reads from here on
        t0, reading = clock(), 1
        for step in range(1, 251):  # to 4.0 s
            assert not loop.before_step()[1]
            end = t0 + step * 0.016
            while t0 + reading * 0.06 <= end:
                clock.t = t0 + reading * 0.06
                if clock.t - t0 >= 3.01:
                    backend.drift_w = 0.5
                loop.on_sample(clock.t, backend.read_power_w())
                reading += 1
            clock.t = end
            loop.after_step()
        locks = [(round(t, 6), f) for t, f in loop.running.lock_log]
        events = loop.guard_events
    assert locks == [(0.0, 800.0), (1.5, 400.0), (1.504, 600.0), (3.3, 400.0)]
    assert [(round(e["t_s"], 6), e["from_mhz"], e["to_mhz"]) for e in events] == [
        (3.3, 600.0, 400.0)
    ]
    assert model_power(16, 600.0) + 0.5 > 4.2 >= model_power(16, 400.0) + 0.5 + 0.05


def test_lowest_clock_still_over_stops_with_checkpoint_and_restores(tmp_path):
    backend = FollowBackend()
    ckpt = str(tmp_path / "ckpt.pt")
    drift_after_three_steps = at_step(4, lambda: setattr(backend, "drift_w", 2.0))
    result, summary = run_loop(
        backend, FixedBudget(3.2), 100000, checkpoint=ckpt, augment=drift_after_three_steps
    )
    assert result.status == STATUS_OVER_BUDGET and summary["status"] == STATUS_OVER_BUDGET
    ev = summary["guard_events"]
    assert [(e["from_mhz"], e["to_mhz"]) for e in ev] == [(400.0, 200.0), (200.0, None)]
    assert "lowest profiled clock 200 MHz" in summary["stop_reason"]
    assert os.path.isfile(ckpt) and 0 < result.samples < 100000
    assert backend.locked is None and backend.restores >= 1
    # The checkpoint resumes (the drift gone): the counts carry on from where it stopped.
    backend2 = FollowBackend()
    result2, summary2 = run_loop(
        backend2, FixedBudget(3.2), result.samples + 256, checkpoint=ckpt,
        augment=drift_after_three_steps,  # the run's own (its fourth step is long past)
    )  # fmt: skip
    assert result2.resumed_from_samples == result.samples
    # the run's record is cumulative: the first call's guard events, and no new ones
    assert result2.samples >= result.samples + 256 and summary2["guard_events"] == ev
    # (the checkpoint's record ends where it was written, a moment before the loop stopped)
    key = [(s["start_s"], s["freq_mhz"], s["reason"]) for s in summary["segments"]]
    assert [(s["start_s"], s["freq_mhz"], s["reason"]) for s in summary2["segments"]][
        : len(key)
    ] == key
    assert summary2["segments"][len(key)]["reason"] == "resume"


def test_a_refused_clock_is_the_trainers_status_too_and_its_checkpoint_resumes(tmp_path):
    """The guard must lower the clock and the device refuses: the loop, the trainer's own
    result and its checkpoint all say ``error`` (one stop, one meaning), and that checkpoint
    resumes on a device that accepts the clock again."""
    from fleet.agent.devices.base import DeviceError
    from fleet.agent.training.checkpoint import torch_load_cpu

    class RefusingBackend(FollowBackend):
        refuse = False

        def lock(self, freq_mhz):
            if self.refuse:
                raise DeviceError("cannot write max_freq: Permission denied")
            super().lock(freq_mhz)

    backend = RefusingBackend()
    ckpt = str(tmp_path / "ckpt.pt")

    def drift_and_refuse() -> None:
        backend.refuse, backend.drift_w = True, 2.0

    drift_and_refuse_after_three_steps = at_step(4, drift_and_refuse)
    result, summary = run_loop(
        backend, FixedBudget(3.2), 100000, checkpoint=ckpt,
        augment=drift_and_refuse_after_three_steps,
    )  # fmt: skip
    assert (result.status, summary["status"]) == ("error", "error")
    assert summary["stop_reason"].startswith("could not change the clock: cannot write max_freq")
    assert os.path.isfile(ckpt) and 0 < result.samples < 100000
    assert backend.locked is None  # the exit restored it (restore is not refused)
    assert torch_load_cpu(ckpt, "checkpoint")["counters"]["status"] == "error"
    result2, _ = run_loop(
        FollowBackend(), FixedBudget(3.2), result.samples + 256, checkpoint=ckpt,
        augment=drift_and_refuse_after_three_steps,  # the run's own (its fourth step is past)
    )  # fmt: skip
    assert result2.resumed_from_samples == result.samples
    assert result2.samples >= result.samples + 256


def test_nothing_fits_the_first_budget_is_one_line_and_restores():
    from fleet.agent.loop.closedloop import ClosedLoopError

    backend = FollowBackend()
    with pytest.raises(ClosedLoopError, match="lowest profiled peak is 1.95 W"):
        run_loop(backend, FixedBudget(1.0), 100)
    assert backend.locked is None


def test_frequencies_are_locked_only_from_the_lut():
    backend = FollowBackend()
    run_loop(backend, ScheduleBudget(parse_schedule("0:6,0.5:3.2")), 1200)
    assert {f for _, f in backend.lock_log} <= set(FREQS)


# ------------------------------------------------------------------------------ the agent


@pytest.mark.slow
def test_agent_train_runs_the_closed_loop_and_falls_back_to_cpu(tmp_path):
    from fleet.agent.protocol.handler_api import Context
    from fleet.agent.protocol.train_command import handle_train
    from fleet.agent.protocol.wire import ProtocolError
    from tests.test_trainer import _train_request

    backend = FollowBackend()
    events = []
    ctx = Context(backend, "jetson", events.append)  # a GPU backend kind; torch has no CUDA here
    req = _train_request(tmp_path, max_samples=1024, target_accuracy=1.0)
    del req["freq_mhz"], req["batch_size"], req["lr"]  # the loop picks b: a reference pair
    req.update(
        budget_schedule="0:6,0.3:3.2",
        profile=lut_rows(),
        efficiency={"batch_sizes": [8, 16, 32], "samples_to_accuracy": [4000, 4000, None]},
        lr_ref_batch=16,
        lr_ref=3e-3,
        drift_time_tol=100.0,  # synthetic LUT times: only a power drift would be real here
    )
    res = handle_train(ctx, req)
    if not torch.cuda.is_available():
        assert res["device"] == "cpu" and any("no CUDA" in n for n in res["notes"])
    assert res["status"] == "not reached" and res["samples"] >= 1024
    assert res["drift_events"] == [] and res["guard_events"] == []
    segs = res["segments"]
    assert segs[0]["reason"] == "start" and segs[0]["budget_w"] == 6.0
    assert (segs[0]["batch_size"], segs[0]["freq_mhz"]) == (16, 800.0)  # b=32 never reached
    assert segs[-1]["end_s"] == pytest.approx(res["loop_time_s"])
    assert res["loop_energy_j"] == pytest.approx(sum(s["energy_j"] for s in segs))
    assert backend.locked is None and backend.restores >= 1
    assert os.path.isfile(req["checkpoint"]) and os.path.isfile(req["out_weights"])
    bad = dict(req, freq_mhz=800.0)
    with pytest.raises(ProtocolError, match="exclude each other"):
        handle_train(ctx, bad)
    with pytest.raises(ProtocolError, match="times must strictly increase"):
        handle_train(ctx, dict(req, budget_schedule="0:6,5:4,2:3"))
    assert backend.locked is None


@pytest.mark.slow
def test_closed_loop_resume_is_exact_under_a_fixed_budget(tmp_path):
    def run(max_samples, ckpt):
        model = build_model("small_cnn", num_classes=2, input_shape="1x8x8", seed=0, width=4)
        result, _ = under_budget(
            FollowBackend(), model, TRAIN, TEST, lut_from_rows(lut_rows()), EFF,
            FixedBudget(4.2), 32, 1e-3, target_accuracy=1.0, max_samples=max_samples,
            eval_every_samples=256, checkpoint_path=ckpt,
        )  # fmt: skip
        return result, model

    ckpt = str(tmp_path / "split.pt")
    first, _ = run(512, ckpt)
    resumed, m_split = run(1024, ckpt)
    whole, m_whole = run(1024, str(tmp_path / "whole.pt"))
    assert first.samples == 512 and resumed.resumed_from_samples == 512
    assert resumed.samples == whole.samples == 1024
    assert resumed.curve == whole.curve
    s1, s2 = m_split.state_dict(), m_whole.state_dict()
    assert all(torch.equal(s1[k], s2[k]) for k in s1)  # bit-identical on the CPU

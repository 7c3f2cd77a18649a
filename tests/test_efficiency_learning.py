"""Efficiency that learns, in simulation: a replay device re-selects when its estimate improves,
the coordinator's store learns across rounds, and the re-plan uses what devices learnt.

Profiles, traces and curves are built here as real files (``fleet.core.curves`` writes the
curves CSV a replay device reads); every expected number is worked out in the test.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from fleet.common.errors import InputError
from fleet.config.fleetfile import DeviceSpec, RunSettings, load_fleet
from fleet.core.curves import Curves, curves_path, load_curves, save_curves
from fleet.core.efficiency import Efficiency, load_efficiency, save_efficiency
from fleet.core.profile import load_profile
from fleet.planning import replan
from fleet.planning.learning_rounds import simulate_rounds
from fleet.rounds.device_round import run_device
from fleet.rounds.progress import Progress, read_progress
from fleet.rounds.virtual_clock import VirtualClock, cached_curves, simulate_device
from fleet.trust.efficiency_store import EfficiencyStore, Observation, posteriors

ROOT = Path(__file__).resolve().parents[1]
TARGET = 0.9
# b=16 costs 1.25 ms a sample, b=128 1.0 ms: with equal samples-to-target b=128 wins
PROFILE = (
    "batch_size,freq_mhz,time_per_batch_s,peak_power_w,mean_power_w,device\n"
    "16,921.6,0.02,4.0,3.0,jetson-nano\n128,921.6,0.128,4.4,3.5,jetson-nano\n"
)


def exp_curve(n: float, every: float) -> list[tuple[float, float]]:
    """An exponential approach from 0.2 that meets TARGET exactly at ``n`` (not before)."""
    top = 0.2 + (TARGET - 0.2) / (1 - math.exp(-3.0))
    pts = [(0.0, 0.2)]
    s = every
    while s < n:
        pts.append((s, min(top - (top - 0.2) * math.exp(-3.0 * s / n), TARGET - 1e-4)))
        s += every
    return pts + [(float(n), TARGET)]


def files(tmp: Path, truth: dict[int, float], b_noise: float | None) -> tuple[Path, Path]:
    """A profile and a trace with its curves (and noise readings of ``b_noise`` when given)."""
    prof = tmp / "p.csv"
    prof.write_text(PROFILE)
    trace = tmp / "truth.csv"
    save_efficiency(Efficiency(truth, metadata={"target_accuracy": f"{TARGET:g}"}), trace)
    runs, noise = {}, {}
    for b, n in truth.items():
        runs[(b, 0)] = exp_curve(n, 256)
        if b_noise is not None:
            noise[(b, 0)] = [(s, b_noise, 0.05) for s, _ in runs[(b, 0)] if s > 0]
    save_curves(Curves(runs, target=TARGET, noise=noise), curves_path(trace))
    return prof, trace


def device(prof: Path, trace: Path) -> DeviceSpec:
    return DeviceSpec("d", "jetson-nano", 5.0, str(prof), str(trace))


def run_of(mode: str, objective: str = "time", **settings: object) -> RunSettings:
    return RunSettings(
        "r", "small_cnn", "shipped.csv", TARGET, objective=objective,
        learn_efficiency=mode, **settings,  # type: ignore[arg-type]
    )  # fmt: skip


def test_a_replay_device_whose_noise_scale_says_small_batches_re_selects(tmp_path):
    """Shipped: both batch sizes need 10,000 samples (b=128 is cheaper). The device's data
    needs 4,000 at b=16: its training steps show a noise scale of 8, whose law says b=16
    needs 24/136 of b=128's samples. Learning from it, the device leaves b=128 for b=16
    (reason ``learned``) and finishes sooner than Algorithm 1 on the shipped vector."""
    truth = {16: 4000.0, 128: 10000.0}
    prof, trace = files(tmp_path, truth, b_noise=8.0)
    # the proxy's own runs showed the law within 6 %: the device may take it
    law = {"noise_law_err": "0.06"}
    shipped = Efficiency({16: 10000.0, 128: 10000.0}, source="shipped.csv", metadata=law)
    spec = device(prof, trace)
    # a vector whose law was never checked (no noise_law_err) does not let the law move it
    unchecked = simulate_device(spec, dataclasses.replace(shipped, metadata={}), run_of("device"))
    assert [s.batch_size for s in unchecked.segments] == [128]
    plain = simulate_device(spec, shipped, run_of("none"))
    assert [s.batch_size for s in plain.segments] == [128]
    assert plain.time_s == pytest.approx(10000 * 0.128 / 128)
    got = simulate_device(spec, shipped, run_of("device"))
    assert got.status == "ok"
    assert [(s.batch_size, s.reason) for s in got.segments] == [(128, ""), (16, "learned")]
    switch = got.segments[1].start_s
    done = switch / (10000 * 0.128 / 128)  # fraction reached at b=128 before the switch
    assert got.time_s == pytest.approx(switch + (1 - done) * 4000 * 0.02 / 16, rel=1e-9)
    assert got.time_s < plain.time_s
    assert got.learned_batch_size == 16 and got.learned_samples == pytest.approx(4000.0, rel=0.01)
    assert got.efficiency_fits == []  # device mode: no curve fits, only the noise scale


def test_online_curve_corrects_the_deadline_sooner_than_the_shipped_estimate(tmp_path):
    """Deadline objective at b=16 with a slow, frugal clock (2.5 ms and 5 mJ a sample) and a
    fast, costly one (1.25 ms, 6.25 mJ). Shipped: 2,000 samples, so the slow clock meets a
    5.5 s deadline (5 s). The data needs 6,000: the learning device reads it off its curve and
    moves to the fast clock (reason ``learned``); one that does not learn stays slow to the end
    (the replay re-prices nothing without a budget step) and finishes far later."""
    prof = tmp_path / "clocks.csv"
    prof.write_text(
        "batch_size,freq_mhz,time_per_batch_s,peak_power_w,mean_power_w,device\n"
        "16,460.8,0.04,2.5,2.0,jetson-nano\n16,921.6,0.02,6.0,5.0,jetson-nano\n"
    )
    _, trace = files(tmp_path, {16: 6000.0}, b_noise=None)
    shipped = Efficiency({16: 2000.0}, source="shipped.csv")
    spec = DeviceSpec("d", "jetson-nano", None, str(prof), str(trace))
    none = simulate_device(spec, shipped, run_of("none", "deadline", deadline_s=5.5))
    learn = simulate_device(spec, shipped, run_of("online", "deadline", deadline_s=5.5))
    assert [(s.freq_mhz, s.reason) for s in none.segments] == [(460.8, "")]
    assert none.time_s == pytest.approx(6000 * 0.04 / 16) and none.status == "late"
    assert learn.segments[0].freq_mhz == 460.8
    assert [(s.freq_mhz, s.reason) for s in learn.segments[1:]] == [(921.6, "learned")]
    switch = learn.segments[1].start_s
    done = switch / (6000 * 0.04 / 16)
    assert learn.time_s == pytest.approx(switch + (1 - done) * 6000 * 0.02 / 16, rel=1e-9)
    assert learn.time_s < none.time_s


def test_curves_file_round_trip_and_one_line_errors(tmp_path):
    c = Curves({(8, 0): [(0.0, 0.1), (64.0, 0.5)], (8, 1): [(0.0, 0.1), (64.0, 0.6)]},
               target=0.5, noise={(8, 0): [(64.0, 12.5, 0.3)]})  # fmt: skip
    path = tmp_path / "x.curves.csv"
    save_curves(c, path)
    back = load_curves(path)
    assert back.runs == c.runs and back.target == 0.5 and back.noise == c.noise
    assert back.reached_at(8, 0, 0.5) == 64.0 and math.isnan(back.reached_at(8, 0, 0.9))
    bad = path.read_text().replace("8,1,64,0.6000", "8,1,0,0.6000")
    path.write_text(bad)
    with pytest.raises(InputError, match=r"x.curves.csv: line \d+: samples=0 .* does not increase"):
        load_curves(path)
    path.write_text("batch_size,seed,samples,accuracy\n8,0,0,1.5\n")
    with pytest.raises(InputError, match=r"line 2: accuracy='1.5' must be a number in \[0, 1\]"):
        load_curves(path)


def test_store_learns_each_device_and_leaves_its_own_evidence_out_of_the_fleet_level(tmp_path):
    prior = Efficiency({4: 1000.0, 32: 2000.0, 128: 4000.0}, source="proxy.csv")
    rows = [
        {"device": "a", "status": "ok", "learned_batch_size": 32, "learned_samples": 4000.0,
         "learned_log_sd": 0.05},
        {"device": "b", "status": "ok", "learned_batch_size": 128, "learned_samples": 8000.0,
         "learned_log_sd": 0.05},
        {"device": "c", "status": "error"},  # learnt nothing
        {"device": "d", "status": "ok", "learned_batch_size": 32, "learned_samples": -1.0,
         "learned_log_sd": 0.05},  # implausible: refused
    ]  # fmt: skip
    store = EfficiencyStore(tmp_path / "store")
    got = store.record(1, rows, {"a": "proxy.csv"})
    assert [o.device for o in got] == ["a", "b"] and got[0].shipped == "proxy.csv"
    assert store.record(1, rows, {}) and len(store.observations()) == 2  # replaced, not doubled
    ship = store.shipments(prior, ["a", "b", "e"], 2)
    # everybody's data needs about twice the proxy's samples; "a" most at b=32
    for name in ("a", "b", "e"):
        assert ship[name].samples[32] == pytest.approx(4000.0, rel=0.15)
        assert ship[name].metadata["source"] == "learned"
    assert ship["a"].samples[32] == pytest.approx(4000.0, rel=0.02)
    saved = json.loads((tmp_path / "store" / "shipped" / "round-002.json").read_text())
    assert set(saved["devices"]) == {"a", "b", "e"} and saved["round"] == 2
    # the posterior is the numpy-free formula's: "e" (no evidence) equals the leave-out fleet
    again = posteriors(prior, store.observations(), ["e"])
    assert again["e"].samples == pytest.approx(ship["e"].samples)
    (tmp_path / "store" / "observations.jsonl").write_text("{not json\n")
    with pytest.raises(InputError, match=r"observations.jsonl: line 1: not an observation"):
        store.observations()
    assert Observation.from_row(1, {"device": "x", "learned_batch_size": True}) is None


def test_replan_takes_a_learning_device_at_its_own_finish_early_by_its_doubt():
    sure = replan.Standing("a", 100.0, 0.2, 500.0, 1.0, own_finish_s=700.0, own_finish_sd=0.0)
    unsure = dataclasses.replace(sure, own_finish_sd=0.4)
    assert replan.fastest_finish(sure) == pytest.approx(700.0)
    left = 600.0 * math.exp(-replan.CONFIDENCE_Z * 0.4)
    assert replan.fastest_finish(unsure) == pytest.approx(100.0 + left)
    blind = replan.Standing("b", 100.0, 0.5, 400.0, inflation=2.0)
    assert replan.fastest_finish(blind) == pytest.approx(100.0 + 0.5 * 400.0 * 2.0)
    prog = Progress(time_s=100.0, samples=500.0, done=0.25, end_batch_size=16)
    assert replan.deadline_for(1000.0, prog, {16: 1000.0}) == pytest.approx(100 + 900 / 2.0)
    prog.samples_to_target = 2000.0  # it learns: it gets the deadline as it is
    assert replan.deadline_for(1000.0, prog, {16: 1000.0}) == 1000.0
    row = {"status": "ok", "time_s": 1200.0}
    assert replan.settle(row, 1000.0)[0] == "late" and replan.settle(row, 1300.0) is None


def test_progress_carries_a_bounded_learning_state():
    ok = Progress.from_dict({"time_s": 1.0, "learning": {"curve": [[1, 0.5]], "ran": [[8, 1]]}})
    assert ok.learning == {"curve": [[1, 0.5]], "ran": [[8, 1]]}
    with pytest.raises(InputError, match="progress field 'learning' must hold finite numbers"):
        read_progress({"learning": {"curve": [[1, float("nan")]]}})
    with pytest.raises(InputError, match="progress field 'learning' is .* bytes, at most"):
        read_progress({"learning": {"curve": [[1, 0.5]] * 30000}})


def _read_the_long_way(text: str):
    try:
        return Progress.from_dict(json.loads(text), "p")
    except ValueError as exc:
        return type(exc).__name__, str(exc)


def _read_from_json(text: str):
    try:
        return Progress.from_json(text, "p")
    except ValueError as exc:
        return type(exc).__name__, str(exc)


def test_a_progress_read_from_its_text_is_the_one_from_dict_or_the_same_refusal():
    """``Progress.from_json`` skips re-writing a learning state it has just read; whatever the
    text (non-finite numbers spelt every way JSON lets them through, characters beyond ASCII,
    states near and over the size bound, learning that is not an object), the record or the
    refusal is the long way's, and the state is the parse's own copy."""
    state = {"curve": [[24000.0, 0.235], [28000, 0.25]], "ran": [[32, 158717.03]], "fit": None}
    base = {"version": 2, "time_s": 1200.0, "samples": 5.0, "segments": 1}
    texts = [json.dumps(dict(base, learning=state))]
    for odd in ("NaN", "Infinity", "-Infinity", "1e999", "1E400", "-1e+309", "9" * 320):
        texts.append(json.dumps(dict(base, learning=state)).replace("0.235", odd))
    texts += [
        json.dumps(dict(base, learning=dict(state, note="caf\u00e9"))),
        json.dumps(dict(base, learning=dict(state, note="café")), ensure_ascii=False),
        json.dumps(dict(base, learning=dict(state, note="\U0001f600" * 9000)), ensure_ascii=False),
        json.dumps(dict(base, learning={"curve": [[1, 9e15]] * 4000}), separators=(",", ":")),
        json.dumps(dict(base, learning={"curve": [[1, 0.5]] * 30000})),
        json.dumps(dict(base, learning=[1, 2])),
        json.dumps(dict(base, learning=None)),
        json.dumps(dict(base, time_s=float("nan"), learning=state)),
        json.dumps(dict(base, samples=-1.0, learning=state)),
        json.dumps(dict(base, learnin=state)),
        json.dumps([1, 2]),
        "{not json",
    ]
    fast = 0
    for text in texts:
        want, got = _read_the_long_way(text), _read_from_json(text)
        assert got == want, text[:120]
        fast += isinstance(got, Progress) and got.learning == state
    assert fast == 1  # the one plain state went the short way and read the same
    text = texts[0]
    one, two = Progress.from_json(text), Progress.from_json(text)
    one.learning["curve"].append([1, 1])
    assert two.learning == state  # each parse owns its state


@pytest.mark.slow
def test_the_default_fleet_plans_its_second_round_on_what_the_first_taught(tmp_path):
    """Round 1 plans the deadline on the proxy (far too early); the devices' evidence teaches
    the store, and round 2's plan, made before anyone trains, is within 5 % of the round time
    that follows."""
    fleet = load_fleet(ROOT / "simulations" / "fleets" / "default.toml")
    rounds = simulate_rounds(fleet, "deadline", 2, tmp_path / "store")
    first, second = rounds
    planned = [r.plan["revisions"][0]["deadline_s"] for r in rounds]  # before anyone trains
    assert planned[0] == first.plan["revisions"][0]["deadline_s"]
    assert planned[0] < 0.8 * first.totals["round_time_s"]
    assert planned[1] == pytest.approx(second.totals["round_time_s"], rel=0.05)
    obs = EfficiencyStore(tmp_path / "store").observations()
    assert {o.round for o in obs} == {1, 2} and all(o.reached for o in obs)
    svhn = load_efficiency(ROOT / "simulations" / "efficiency" / "resnet18_svhn.csv")
    for o in obs:  # a device that met its target knows its count (exactly at one batch size,
        # counted at its last one after a switch)
        assert o.samples_to_target == pytest.approx(svhn.samples[o.batch_size], rel=0.1)


def test_learning_needs_curves_and_a_known_mode(tmp_path):
    prof, trace = files(tmp_path, {16: 4000.0, 128: 10000.0}, None)
    spec = device(prof, trace)
    shipped = Efficiency({16: 10000.0, 128: 10000.0}, source="shipped.csv")
    bad = simulate_device(spec, shipped, run_of("sometimes"))
    assert bad.status == "error"
    assert bad.message == (
        "[run] learn_efficiency: expected one of none, online, device, all, got 'sometimes'"
    )
    curves_path(trace).unlink()
    cached_curves.cache_clear() if hasattr(cached_curves, "cache_clear") else None
    plain = run_device(spec, load_profile(prof), shipped, run_of("online"),
                       VirtualClock(load_efficiency(trace)))  # fmt: skip
    assert plain.efficiency_fits == [] and plain.learned_samples is None


def test_a_deadline_is_planned_half_a_deviation_up_a_learned_vector():
    """A vector the fleet learnt carries its posterior's sd: the planning exchange prices it
    ``DEADLINE_Z`` sd up (a device's fastest finish scales with its samples: exp(0.5 x 0.2));
    the proxy's vector is planned as shipped."""
    from fleet.agent.learning.efficiency_learner import DEADLINE_Z
    from fleet.core.choice import align
    from fleet.core.profile import load_profile
    from fleet.method.budget import BudgetStep
    from fleet.planning.deadline_plan import plan_device

    prof = load_profile(
        Path(__file__).resolve().parents[1] / "simulations/profiles/nano_small_cnn.csv"
    )
    samples = {b: 10000.0 for b in (4, 8, 16, 32, 64, 128)}
    std = {b: 0.2 * n for b, n in samples.items()}
    proxy = Efficiency(samples, std, source="proxy.csv", metadata={"source": "trained"})
    learned = dataclasses.replace(proxy, metadata={"source": "learned"})
    steps = (BudgetStep(0.0, 5.0),)
    got = {}
    for name, eff in (("proxy", proxy), ("learned", learned)):
        aligned, eff_a, _ = align(prof, eff)
        got[name] = plan_device(steps, aligned.points, eff_a).fastest_finish_s
    assert got["learned"] == pytest.approx(got["proxy"] * math.exp(DEADLINE_Z * 0.2), rel=1e-9)

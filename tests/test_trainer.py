"""The on-device trainer: target/cap stopping, determinism, exact resume after SIGKILL, the
fingerprint guard, power windows, and the agent's ``train`` command over real JSON lines.

Everything runs on a tiny task (1x8x8 two-class images with a weak +/- pattern, small_cnn of
width 4), one torch thread (2-core machine shared with other test runs), a few seconds in all.
"""

import csv
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch

from fleet.agent.data import tensorfile
from fleet.agent.devices.replay import ReplayBackend
from fleet.agent.measure.sampler import PowerSampler
from fleet.agent.models.registry import build_model
from fleet.agent.protocol.handler_api import Context
from fleet.agent.protocol.train_command import handle_train
from fleet.agent.training.evaluation import evaluate
from fleet.agent.training.plan import TrainHooks, TrainPlan
from fleet.agent.training.train_state import TrainerError
from fleet.agent.training.trainer import train_to_target
from tests.test_agent_protocol import Agent

ROOT = Path(__file__).resolve().parents[1]
NANO_CSV = ROOT / "simulations" / "profiles" / "nano_resnet18.csv"
TIMEOUT = 60.0
K = 64  # evaluation cadence, a multiple of the batch size
KW = dict(batch_size=16, lr=3e-3, target_accuracy=0.85, eval_every_samples=K, max_samples=4096)


def train(model, train_set, test_set, **kw):
    """``train_to_target`` with the tests' keywords split into its records: the plan's fields,
    the hooks' fields, ``device`` and ``checkpoint_path``."""
    hooks = TrainHooks(**{k: kw.pop(k) for k in list(kw) if k in TrainHooks._fields})
    device, ckpt = kw.pop("device", "cpu"), kw.pop("checkpoint_path", None)
    return train_to_target(model, train_set, test_set, TrainPlan(**kw), hooks, device, ckpt)


def make_data(n, seed, signal_strength=0.15):
    """Two classes: noise plus a weak left/right +/- pattern whose sign is the label."""
    g = torch.Generator()
    g.manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=g)
    pattern = torch.zeros(1, 8, 8)
    pattern[:, :4], pattern[:, 4:] = 1.0, -1.0
    sign = (2 * y.float() - 1).view(-1, 1, 1, 1)
    x = torch.randn(n, 1, 8, 8, generator=g) + signal_strength * sign * pattern
    return x, y


TRAIN = make_data(512, 1)
TEST = make_data(256, 2)


def fresh_model(width=4):
    return build_model("small_cnn", num_classes=2, input_shape="1x8x8", seed=0, width=width)


def same_weights(m1, m2):
    s1, s2 = m1.state_dict(), m2.state_dict()
    return s1.keys() == s2.keys() and all(torch.equal(s1[k], s2[k]) for k in s1)


def digest(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# --------------------------------------------------------------------------------------------
# (a) reaches the target and stops on the cadence; (b) the cap


def test_reaches_target_and_stops_on_cadence():
    r = train(fresh_model(), TRAIN, TEST, seed=0, **KW)
    assert r.status == "reached" and r.reached
    assert r.samples_to_accuracy == r.samples > 0
    assert r.samples_to_accuracy % K == 0  # k is a multiple of the batch: evals on multiples of k
    assert r.steps * KW["batch_size"] == r.samples
    assert [s for s, _ in r.curve] == list(range(0, r.samples + 1, K))  # eval at 0, then every k
    assert r.curve[-1][1] >= 0.85 and all(a < 0.85 for _, a in r.curve[:-1])
    assert r.final_accuracy == r.curve[-1][1] and r.best_accuracy >= r.final_accuracy
    assert len(r.loss_curve) == len(r.curve) - 1
    assert 0 < r.train_time_s < r.wall_time_s and r.eval_time_s > 0
    assert r.energy_j is None and r.peak_power_w is None and r.sessions == 1
    d = r.to_dict()
    assert json.loads(json.dumps(d))["samples_to_accuracy"] == r.samples_to_accuracy
    assert d["reached"] is True and d["curve"][0] == [0, r.curve[0][1]]


def test_unreachable_target_stops_at_cap():
    # The classes overlap (noise >> signal): 100% is out of reach. 200 is not a multiple of
    # the batch, so the cap rounds up to the next step (208) and gets its own evaluation.
    kw = dict(KW, target_accuracy=1.0, max_samples=200)
    r = train(fresh_model(), TRAIN, TEST, seed=0, **kw)
    assert r.status == "not reached" and not r.reached
    assert r.samples_to_accuracy is None and r.samples == 208
    assert [s for s, _ in r.curve] == [0, 64, 128, 192, 208]


def test_raising_the_cap_continues_a_finished_checkpoint(tmp_path):
    ckpt = str(tmp_path / "cap.pt")
    kw = dict(KW, target_accuracy=1.0, seed=0, checkpoint_path=ckpt)
    first = train(fresh_model(), TRAIN, TEST, **dict(kw, max_samples=200))
    again = train(fresh_model(), TRAIN, TEST, **dict(kw, max_samples=200))
    assert again.curve == first.curve and again.train_time_s == first.train_time_s  # no work
    model = fresh_model()
    more = train(model, TRAIN, TEST, **dict(kw, max_samples=400))
    assert more.samples == 400 and more.curve[:5] == first.curve and more.sessions == 2
    # The extra evaluation at 208 did not perturb training: same weights as one run to 400.
    straight = fresh_model()
    train(straight, TRAIN, TEST, **dict(KW, target_accuracy=1.0, max_samples=400))
    assert same_weights(model, straight)


# --------------------------------------------------------------------------------------------
# (e) determinism


def test_same_seed_gives_identical_runs():
    m1, m2 = fresh_model(), fresh_model()
    r1 = train(m1, TRAIN, TEST, seed=3, **KW)
    r2 = train(m2, TRAIN, TEST, seed=3, **KW)
    assert r1.samples_to_accuracy == r2.samples_to_accuracy
    assert r1.curve == r2.curve and r1.loss_curve == r2.loss_curve
    assert same_weights(m1, m2)
    r3 = train(fresh_model(), TRAIN, TEST, seed=4, **KW)
    assert r3.loss_curve != r1.loss_curve  # the seed does steer the data order


# --------------------------------------------------------------------------------------------
# (c) SIGKILL between evaluations, then resume: same samples_to_accuracy, same curve

HELPER = textwrap.dedent(
    """
    import json, sys, time
    import torch
    from fleet.agent.models.registry import build_model
    from fleet.agent.data import tensorfile
    from fleet.agent.training.plan import TrainHooks, TrainPlan
    from fleet.agent.training.trainer import train_to_target

    data_path, ckpt, kw = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    data = tensorfile.load(data_path)

    class SlowDataset(torch.utils.data.Dataset):
        # Same samples as the tensors, slower: the kill lands mid-stretch, not at its end.
        def __init__(self, x, y):
            self.x, self.y = x, y
        def __len__(self):
            return len(self.x)
        def __getitem__(self, i):
            time.sleep(0.002)
            return self.x[i], self.y[i]

    def hold(done, total, info):
        if info.get("phase") == "eval" and done >= 2 * kw["eval_every_samples"]:
            time.sleep(600)  # never finish on our own: the test kills us

    model = build_model("small_cnn", num_classes=2, input_shape="1x8x8", seed=0, width=4)
    train_to_target(model, SlowDataset(*data["train"]), data["test"], TrainPlan(**kw),
                    TrainHooks(progress=hold), checkpoint_path=ckpt)
    """
)


@pytest.mark.slow
def test_sigkill_then_resume_matches_uninterrupted(tmp_path):
    ma = fresh_model()
    a = train(ma, TRAIN, TEST, seed=0, checkpoint_path=str(tmp_path / "a.pt"), **KW)
    assert a.reached and a.samples_to_accuracy > 2 * K  # several stretches: room to crash in

    data = tmp_path / "data.pt"
    tensorfile.save({"train": TRAIN, "test": TEST}, str(data), "data")
    script = tmp_path / "helper.py"
    script.write_text(HELPER)
    ckpt = tmp_path / "b.pt"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    args = [sys.executable, str(script), str(data), str(ckpt), json.dumps(dict(KW, seed=0))]
    proc = subprocess.Popen(args, env=env, cwd=str(ROOT), stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + TIMEOUT
        while not ckpt.exists():
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, f"no checkpoint within {TIMEOUT} s"
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=TIMEOUT)
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    saved = tensorfile.load(str(ckpt), "checkpoint")["counters"]
    assert saved["status"] == "running" and saved["samples"] in (K, 2 * K)

    mb = fresh_model()
    b = train(mb, TRAIN, TEST, seed=0, checkpoint_path=str(ckpt), **KW)
    assert b.samples_to_accuracy == a.samples_to_accuracy and b.samples == a.samples
    assert b.curve == a.curve and b.loss_curve == a.loss_curve and b.steps == a.steps
    assert same_weights(ma, mb)
    assert b.sessions == 2 and b.resumed_from_samples == saved["samples"]

    # A finished checkpoint is answered without training, and its weights are loaded.
    mc = fresh_model()
    c = train(mc, TRAIN, TEST, seed=0, checkpoint_path=str(ckpt), **KW)
    assert c.curve == b.curve and c.train_time_s == b.train_time_s and c.sessions == 3
    assert same_weights(mb, mc)


def jitter(x, gen):
    """Augmentation drawing from the trainer's generator, as the trainer asks."""
    return x + 0.1 * torch.randn(x.shape, generator=gen)


class Crash(Exception):
    pass


def test_crash_mid_stretch_with_augmentation_resumes_exactly(tmp_path):
    kw = dict(KW, seed=0, augment=jitter)
    straight = train(fresh_model(), TRAIN, TEST, **kw)
    assert straight.reached and straight.samples_to_accuracy > 160

    def crash(done, total, info):  # called every step (interval 0): dies between evaluations
        if done == 160:
            raise Crash()

    ckpt = str(tmp_path / "aug.pt")
    with pytest.raises(Crash):
        train(
            fresh_model(), TRAIN, TEST, checkpoint_path=ckpt, progress=crash,
            progress_interval_s=0.0, **kw
        )  # fmt: skip
    resumed = train(fresh_model(), TRAIN, TEST, checkpoint_path=ckpt, **kw)
    assert resumed.resumed_from_samples == 128
    assert resumed.samples_to_accuracy == straight.samples_to_accuracy
    assert resumed.curve == straight.curve and resumed.loss_curve == straight.loss_curve


# --------------------------------------------------------------------------------------------
# (d) a checkpoint of another run is refused and left alone


def test_foreign_checkpoint_is_refused_and_untouched(tmp_path):
    ckpt = tmp_path / "run.pt"
    train(fresh_model(), TRAIN, TEST, seed=0, checkpoint_path=str(ckpt), **KW)
    before = (digest(ckpt), os.stat(str(ckpt)).st_mtime_ns)
    flipped = (TRAIN[0], 1 - TRAIN[1])
    cases = [
        (dict(model=fresh_model(width=8)), "params"),
        (dict(train=flipped), "train.head_tail"),
        (dict(batch_size=32), "batch_size is 16 there, 32 here"),
        (dict(seed=1), "seed"),
    ]
    for change, expected in cases:
        kw = dict(KW, seed=0)
        kw.update({k: v for k, v in change.items() if k not in ("model", "train")})
        with pytest.raises(TrainerError) as info:
            train(
                change.get("model", fresh_model()), change.get("train", TRAIN), TEST,
                checkpoint_path=str(ckpt), **kw
            )  # fmt: skip
        message = str(info.value)
        assert "another run" in message and expected in message and "\n" not in message
        assert (digest(ckpt), os.stat(str(ckpt)).st_mtime_ns) == before


# --------------------------------------------------------------------------------------------
# Power windows and the char task


class SampledPhases(torch.nn.Module):
    """The model, made to last until the sampler has read the rail at least once in each
    phase (training, evaluation): however fast this machine runs the tiny model, both phases
    are sampled, and the verdict below is about which windows count, not about luck."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.read_in = {True: threading.Event(), False: threading.Event()}

    def forward(self, x):
        assert self.read_in[self.training].wait(TIMEOUT), "the sampler never read"  # a guard
        return self.inner(x)


def test_energy_counts_training_windows_only():
    model = SampledPhases(fresh_model())
    eval_reads = []

    def read():  # 5 W while training, 100 W while the trainer evaluates (model in eval mode)
        model.read_in[model.training].set()
        if not model.training:
            eval_reads.append(1)
            return 100.0
        return 5.0

    sampler = PowerSampler(read, hz=1000.0)
    big_test = make_data(2048, 5)
    r = train(model, TRAIN, big_test, seed=0, power_read=sampler, **KW)
    assert not sampler.running  # the trainer started it, so the trainer stopped it
    assert eval_reads, "the sampler never ran during an evaluation: nothing was excluded"
    assert r.peak_power_w == 5.0 and r.mean_power_w == pytest.approx(5.0)
    assert r.energy_j == pytest.approx(5.0 * r.train_time_s) and r.power_samples > 0


def test_char_task_counts_characters():
    class Echo(torch.nn.Module):  # predicts each input token as its own next character
        def forward(self, idx):
            return torch.nn.functional.one_hot(idx, 5).float()

    x = torch.randint(0, 5, (6, 8), generator=torch.Generator().manual_seed(0))
    y = x.clone()
    y[:, :2] = (x[:, :2] + 1) % 5  # 2 of 8 positions wrong in every row
    assert evaluate(Echo(), (x, y), batch_size=4, task="char") == pytest.approx(6 / 8)

    text = torch.arange(16 * 9).remainder(4).view(16, 9)  # period-4 sequence: learnable
    data = (text[:, :-1].contiguous(), text[:, 1:].contiguous())
    model = build_model(
        "char_transformer", vocab_size=4, input_shape="8", seed=0, n_layers=1, n_heads=2,
        d_model=16,
    )  # fmt: skip
    r = train(
        model, data, data, batch_size=8, lr=1e-2, target_accuracy=0.99, optimizer="adamw",
        eval_every_samples=16, max_samples=4000, task="char",
    )  # fmt: skip
    assert r.reached and r.samples_to_accuracy % 16 == 0


# --------------------------------------------------------------------------------------------
# (f) the agent's train command: in-process (lock observed, restore on error) and over stdio


def _save_inputs(tmp_path):
    data = tmp_path / "data.pt"
    weights = tmp_path / "init.pt"
    tensorfile.save({"train": TRAIN, "test": TEST}, str(data), "data")
    tensorfile.save(fresh_model().state_dict(), str(weights), "weights")
    return str(data), str(weights)


def _train_request(tmp_path, **extra):
    data, weights = _save_inputs(tmp_path)
    req = dict(
        cmd="train", model="small_cnn", model_options={"width": 4}, num_classes=2,
        weights=weights, data=data, batch_size=8, lr=3e-3, target_accuracy=0.85,
        eval_every_samples=K, max_samples=2048, seed=0, freq_mhz=614.4, sampler_hz=200,
        checkpoint=str(tmp_path / "ckpt.pt"), out_weights=str(tmp_path / "out.pt"),
    )  # fmt: skip
    req.update(extra)
    return req


def test_train_handler_locks_during_training_and_restores_on_error(tmp_path):
    backend = ReplayBackend(str(NANO_CSV))
    seen = []  # the backend's lock at every progress event, i.e. while training runs
    ctx = Context(backend, "replay", lambda ev: seen.append((backend.locked_mhz, ev)))
    res = handle_train(ctx, _train_request(tmp_path))
    assert res["status"] == "reached" and res["freq_mhz"] == 614.4 and res["restored"] is True
    assert seen and all(locked == 614.4 for locked, _ in seen)
    assert backend.lock_log == [614.4] and backend.locked_mhz is None and backend.restores == 1
    assert backend.batch_size is None  # the virtual device is idle again

    (tmp_path / "bad").mkdir()
    bad = _train_request(tmp_path / "bad", batch_size=4096)  # fails inside the trainer
    with pytest.raises(TrainerError, match="batch_size 4096 exceeds"):
        handle_train(ctx, bad)
    assert backend.lock_log == [614.4, 614.4] and backend.locked_mhz is None
    assert backend.restores == 2 and backend.batch_size is None


@pytest.mark.integration
def test_agent_train_command_over_stdio(tmp_path):
    req = _train_request(tmp_path)
    # the protocol tests' real agent subprocess, with room for a training run
    agent = Agent(str(NANO_CSV), timeout=TIMEOUT, work_dir=tmp_path)
    try:
        _, hello = agent.call(id=1, cmd="hello")
        assert "train" in hello["capabilities"]["commands"]
        events, res = agent.call(id=2, **req)
        assert res["ok"] is True and res["id"] == 2, res
        _, power = agent.call(id=3, cmd="power")
    finally:
        agent.kill()
    assert res["status"] == "reached" and res["reached"] is True
    assert res["samples_to_accuracy"] % K == 0 and res["samples"] == res["samples_to_accuracy"]
    assert res["time_s"] == res["train_time_s"] < res["wall_time_s"]
    assert res["accuracy"] == res["final_accuracy"] >= 0.85
    assert res["freq_mhz"] == 614.4 and res["restored"] is True and res["power_measured"]
    # Power came from the replayed point (batch 8, 614.4 MHz), its row's mean: only while locked.
    with open(NANO_CSV) as fh:
        row = next(
            r
            for r in csv.DictReader(line for line in fh if not line.startswith("#"))
            if (r["batch_size"], r["freq_mhz"]) == ("8", "614.4")
        )
    replayed = float(row["mean_power_w"])
    assert res["mean_power_w"] == pytest.approx(replayed) == res["peak_power_w"]
    assert res["energy_j"] == pytest.approx(replayed * res["train_time_s"])
    assert power["ok"] is True and power["power_w"] is None  # unlocked and idle afterwards
    assert events and all(e["id"] == 2 and e["event"] == "progress" for e in events)
    assert [e["done"] for e in events] == sorted(e["done"] for e in events)
    assert events[-1]["done"] == res["samples"] and events[-1]["total"] == 2048
    assert os.path.exists(req["checkpoint"])

    # Same request in-process (same data, weights, seed, one thread): same sample count, and
    # the weights the agent wrote are the ones this run ends with.
    model = fresh_model()
    model.load_state_dict(tensorfile.load(req["weights"]))
    local = train(
        model, TRAIN, TEST, batch_size=8, lr=3e-3, target_accuracy=0.85,
        eval_every_samples=K, max_samples=2048, seed=0,
    )  # fmt: skip
    assert local.samples_to_accuracy == res["samples_to_accuracy"]
    assert [list(p) for p in local.curve] == res["curve"]
    out = tensorfile.load(req["out_weights"])
    assert all(torch.equal(out[k], v) for k, v in model.state_dict().items())

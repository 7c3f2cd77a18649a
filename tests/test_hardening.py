"""Hostile and impossible inputs: one representative case per class the hardening issue names.

- profile and efficiency CSVs: impossible values refused with file, line and field; bounded lines;
- tensor files: round trip, a flipped byte refused, old pickles refused with a way out;
- a real malicious pickle given to every loader the agent and the coordinator use, with torch's
  pre-1.13 ``torch.load`` (no ``weights_only``, plain unpickling) emulated: nothing runs;
- a checkpoint whose counters were rewritten (digest recomputed, as a tamperer with the tool
  would) is refused;
- the live agent answers a deeply nested line, a line holding a raw CR, invalid UTF-8 and an
  over-long line with one error each, and still answers ``hello``.
"""

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fleet.agent.data import tensorfile
from fleet.agent.devices.replay import ReplayBackend
from fleet.agent.models.registry import build_model
from fleet.agent.protocol import handler_api, train_args, train_command
from fleet.agent.training import checkpoint
from fleet.agent.training.train_state import TrainerError
from fleet.common.errors import InputError
from fleet.core.efficiency import load_efficiency
from fleet.core.profile import load_profile
from tests.conftest import run_cli
from tests.test_agent_protocol import Agent
from tests.test_trainer import train as run_trainer

ROOT = Path(__file__).resolve().parents[1]
NANO_CSV = ROOT / "simulations" / "profiles" / "nano_resnet18.csv"
HEADER = "batch_size,freq_mhz,time_per_batch_s,peak_power_w,mean_power_w"


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    return str(path)


# ------------------------------------------------------------------------------ CSV parsers


@pytest.mark.parametrize(
    "rows,message",
    [
        (["8,307,0.1,4,5"], "line 2: mean_power_w='5' is above peak_power_w='4'"),
        (["8,307,0.1,0,0"], "line 2: peak_power_w=0 must be > 0"),
        (["8,307,0.1,4,0"], "line 2: mean_power_w=0 must be > 0"),
        (["8,307,1e-320,4,3"], "line 2: time_per_batch_s=1e-320 must be >= 1e-06"),
        (["8,307,0.1,4,3", "8,0,0.1,4,3"], "line 3: freq_mhz=0 must be > 0"),
        (["8,0,0.1,4,3"], "line 2: freq_mhz=0 must be > 0"),
        (["8,-307,0.1,4,3"], "line 2: freq_mhz=-307 must be > 0"),
        (["8,-inf,0.1,4,3"], "line 2: freq_mhz='-inf' must be a finite number"),
        (["8,nan,0.1,4,3"], "line 2: freq_mhz='nan' must be a finite number"),
        (["0,307,0.1,4,3"], "line 2: batch_size=0 must be > 0"),
        (["1e12,307,0.1,4,3"], "line 2: batch_size=1e12 must be > 0 and <= 1.04858e+06"),
        (["8,307,nan,4,3"], "line 2: time_per_batch_s='nan' must be a finite number"),
        (["8,inf,0.1,4,3"], "line 2: freq_mhz='inf' must be a finite number"),
        (["8,307,0.1,4,3", "8,307,0.2,4,3"], "line 3: duplicate point batch_size=8"),
        (['8,307,"0.1', '",4,3'], "line 2: not a CSV record"),
        (["8,307,0.1,4\r,3"], "line 2: carriage return inside a line"),
        (["8,307,0.1,4," + "9" * 70000], "line 2: 70012 characters, at most 65536 allowed"),
    ],
)
def test_impossible_profile_rows_are_refused_with_file_line_field(tmp_path, rows, message):
    path = write(tmp_path, "p.csv", "\n".join([HEADER, *rows]) + "\n")
    with pytest.raises(InputError) as info:
        load_profile(path)
    text = str(info.value)
    assert message in text and text.startswith(path) and "\n" not in text and len(text) < 400


def test_bom_and_crlf_profiles_still_load(tmp_path):
    text = "\ufeff# a comment\r\n" + HEADER + "\r\n8,307,0.1,4,3\r\n16,307,0.2,5,4.5\r\n"
    prof = load_profile(write(tmp_path, "p.csv", text))
    assert [(p.batch_size, p.mean_power_w) for p in prof.points] == [(8, 3.0), (16, 4.5)]


def test_time_only_cpu_profile_at_the_hosts_clock_loads(tmp_path):
    prof = load_profile(write(tmp_path, "cpu.csv", HEADER + "\n8,2596.1,0.1,,\n16,2596.1,0.2,,\n"))
    assert prof.freqs_mhz == [2596.1] and not prof.has_power


@pytest.mark.parametrize("freq", ["0", "-1", "0.0", "nan"])
def test_select_refuses_an_impossible_clock_with_file_line_field(tmp_path, freq):
    """``powerfleet select`` on a profile whose knob is impossible: exit 2, one line naming the
    file, the line and the field, no traceback (it used to select the 0 MHz point)."""
    prof = write(tmp_path, "p.csv", f"{HEADER}\n8,921.6,0.1,4,3\n16,{freq},0.2,4,3\n")
    eff = write(tmp_path, "e.csv", "batch_size,samples_to_accuracy\n8,1000\n16,800\n")
    out = run_cli("select", "--profile", prof, "--efficiency", eff, "--budget-w", "5", "--json")
    err = out.stderr.strip()
    assert out.returncode == 2 and out.stdout == ""
    assert err.count("\n") == 0 and "Traceback" not in err
    assert err.startswith("powerfleet select: error: ") and f"{prof}: line 3: freq_mhz=" in err


@pytest.mark.parametrize(
    "rows,message",
    [
        (["8,0,"], "line 2: samples_to_accuracy='0' must be a finite number > 0"),
        (["8,inf,"], "line 2: samples_to_accuracy='inf' must be a finite number > 0"),
        (["8,100,-1"], "line 2: std='-1' must be a finite number >= 0"),
        (["8,100,1", "16,200,1", "8,300,1"], "line 4: duplicate batch_size=8 (first at line 2)"),
        (["8,1\x00,"], "line 2: NUL byte"),
    ],
)
def test_impossible_efficiency_rows_are_refused(tmp_path, rows, message):
    path = write(tmp_path, "e.csv", "\n".join(["batch_size,samples_to_accuracy,std", *rows]))
    with pytest.raises(InputError) as info:
        load_efficiency(path)
    assert message in str(info.value) and str(info.value).startswith(path)


# ------------------------------------------------------------------------------ tensor files


def test_tensor_file_round_trip_keeps_values_types_and_structure(tmp_path):
    obj = {
        "train": (torch.randn(5, 1, 2, 2), torch.arange(5)),
        "state": {0: {"step": torch.tensor(3.0), "mask": torch.tensor([True, False])}},
        "half": torch.ones(3, dtype=torch.bfloat16) / 3,
        "meta": {"lr": 1e-3, "curve": [[0, 0.5], [16, float("nan")]], "note": None},
    }
    path = str(tmp_path / "t.pft")
    tensorfile.save(obj, path, "data")
    back = tensorfile.load(path, "data")
    assert isinstance(back["train"], tuple) and torch.equal(back["train"][0], obj["train"][0])
    assert back["train"][1].dtype == torch.int64 and torch.equal(back["train"][1], torch.arange(5))
    assert back["state"][0]["mask"].tolist() == [True, False]
    assert back["half"].dtype == torch.bfloat16 and torch.equal(back["half"], obj["half"])
    assert back["meta"]["curve"][1][1] != back["meta"]["curve"][1][1]  # NaN survives
    with pytest.raises(tensorfile.TensorFileError, match="holds a data set .weights expected"):
        tensorfile.load(path, "weights")


def test_flipped_byte_is_refused_in_one_line(tmp_path):
    path = tmp_path / "w.pft"
    tensorfile.save({"w": torch.randn(64)}, str(path), "weights")
    raw = bytearray(path.read_bytes())
    for i in (len(raw) - 5, 60):  # one in the payload, one in the header
        bad = bytearray(raw)
        bad[i] ^= 0x04
        path.write_bytes(bytes(bad))
        with pytest.raises(tensorfile.TensorFileError) as info:
            tensorfile.load(str(path))
        assert "digest mismatch" in str(info.value) and "\n" not in str(info.value)


# ------------------------------------------------------------------------------ hostile pickle


class Evil:
    """Unpickling this creates the marker file: the proof that a loader ran code."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, ("touch " + self.marker,))


def _old_torch_load(f, map_location=None, pickle_module=pickle, **kwargs):
    """torch.load as torch < 1.13 behaves: no weights_only, plain unpickling of anything."""
    if kwargs:
        raise TypeError("load() got an unexpected keyword argument " + next(iter(kwargs)))
    with open(f, "rb") as fh:
        return pickle_module.load(fh)


def test_hostile_pickle_runs_nothing_in_any_loader_even_on_old_torch(tmp_path, monkeypatch):
    marker = tmp_path / "PWNED"
    evil = tmp_path / "evil.pt"
    evil.write_bytes(pickle.dumps({"w": Evil(str(marker))}))
    monkeypatch.setattr(torch, "load", _old_torch_load)  # what JetPack 4.6's torch would do

    from clients.work_dir import TrainFiles
    from fleet.training.task import read_weights

    fingerprint = {"target_accuracy": 0.9}
    loaders = {
        "tensorfile.load": lambda p: tensorfile.load(p),
        "checkpoint.torch_load_cpu": lambda p: checkpoint.torch_load_cpu(p),
        "trainer checkpoint": lambda p: checkpoint.load_checkpoint(p, fingerprint),
        "agent data file": lambda p: train_args.load_train_data(p),
        "agent weights": lambda p: train_command.handle_train(
            handler_api.Context(ReplayBackend(str(NANO_CSV)), "replay", lambda ev: None),
            {
                "cmd": "train",
                "model": "small_cnn",
                "data": p,
                "weights": p,
                "batch_size": 8,
                "lr": 1e-3,
                "target_accuracy": 0.9,
            },
        ),  # fmt: skip
        "coordinator weights (pretrain/estimate)": lambda p: read_weights(p),
        "hardware client out_weights": lambda p: TrainFiles(None, p, p + ".ckpt").trained(),
    }
    for name, load in loaders.items():
        with pytest.raises(Exception) as info:  # noqa: PT011 - the type differs per layer
            load(str(evil))
        text = str(info.value)
        assert "old torch.save (pickle) file" in text and "convert" in text, (name, text)
        assert "\n" not in text, name
        assert not marker.exists(), name + " ran the pickle"
    # the file is really hostile: the emulated old torch.load does run it
    _old_torch_load(str(evil))
    assert marker.exists()


# ------------------------------------------------------------------------------ checkpoints


def _tiny_task():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(96, 1, 8, 8, generator=g)
    y = (x.mean(dim=(1, 2, 3)) > 0).long()
    return (x[:64], y[:64]), (x[64:], y[64:])


def test_tampered_or_damaged_checkpoint_is_refused(tmp_path):
    train, test = _tiny_task()
    ckpt = str(tmp_path / "run.ckpt")
    kw = dict(batch_size=16, lr=1e-3, target_accuracy=0.999, eval_every_samples=32)

    def model():
        return build_model("small_cnn", num_classes=2, input_shape="1x8x8", seed=0, width=4)

    first = run_trainer(model(), train, test, max_samples=64, checkpoint_path=ckpt, **kw)
    assert first.samples == 64
    saved = tensorfile.load(ckpt, "checkpoint")
    assert saved["counters"]["curve"][-1][0] == saved["counters"]["samples"] == 64

    saved["counters"]["samples"] = 6400  # believable, valid digest, contradicts its own curve
    tensorfile.save(saved, ckpt, "checkpoint")
    with pytest.raises(TrainerError, match="contradicts itself: 6400 samples but the last"):
        run_trainer(model(), train, test, max_samples=128, checkpoint_path=ckpt, **kw)

    saved["counters"]["samples"] = 64
    tensorfile.save(saved, ckpt, "checkpoint")
    raw = bytearray(Path(ckpt).read_bytes())
    raw[-3] ^= 0x10
    Path(ckpt).write_bytes(bytes(raw))
    with pytest.raises(TrainerError, match="digest mismatch.*delete it to start over"):
        run_trainer(model(), train, test, max_samples=128, checkpoint_path=ckpt, **kw)


# ------------------------------------------------------------------------------ the live agent


@pytest.mark.integration
def test_agent_answers_hostile_lines_and_keeps_serving():
    agent = Agent(str(NANO_CSV))
    try:
        hostile = [
            b"[" * 200000 + b"]" * 200000,  # deep nesting: the parser would recurse
            b'{"id": 5, "cmd": "nope"}\r{"id": 6, "cmd": "hello"}',  # a CR is not a line end
            b'{"id": 7, "cmd": "lock", "freq_mhz": NaN}',
            b'{"id": 8, "cmd": "hello", "x": "\xff\xfe"}',  # invalid UTF-8
            b'{"id": 9, "cmd": "hello", "pad": "' + b"x" * (2 << 20) + b'"}',  # over 1 MiB
            b"[1, 2, 3]",
        ]
        for line in hostile:
            agent.proc.stdin.buffer.write(line + b"\n")
        agent.proc.stdin.buffer.flush()
        replies = [agent.recv() for _ in hostile]
        _, hello = agent.call(id=10, cmd="hello")
    finally:
        agent.kill()
    assert [r["ok"] for r in replies] == [False] * len(hostile)
    assert all(r["id"] is None or r["id"] == 7 for r in replies)  # nothing answered as id 6
    errors = [r["error"] for r in replies]
    assert "nested 200000 levels deep" in errors[0]
    assert "bad JSON" in errors[1] and "bad JSON" in errors[2]
    assert "not valid UTF-8" in errors[3] and "longer than 1048576 bytes" in errors[4]
    assert "must be a JSON object" in errors[5]
    assert hello["ok"] is True and hello["id"] == 10
    assert all("\n" not in e for e in errors)


@pytest.mark.slow
def test_tensorfile_cli_converts_only_with_a_code_refusing_torch(tmp_path):
    old = tmp_path / "old.pt"
    torch.save({"w": torch.arange(4)}, str(old))
    new = tmp_path / "new.pft"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "fleet.agent.data.tensorfile", "convert", str(old), str(new)]
    proc = subprocess.run(cmd + ["--kind", "weights"], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert torch.equal(tensorfile.load(str(new), "weights")["w"], torch.arange(4))
    old.write_bytes(pickle.dumps(Evil(str(tmp_path / "PWNED"))))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "torch refused" in proc.stderr
    assert not (tmp_path / "PWNED").exists()

"""One budget grammar on every surface: the same strings accepted, the same ones refused, with
the same words (issue 29, "Done when").

Each string goes to ``powerfleet select --budget-w`` and ``powerfleet train --budget-w`` /
``--budget-schedule`` (real processes), a fleet TOML file (``budget_w`` / ``budget_schedule``),
a SuperNode's node config (``budget-w`` / ``budget-schedule``) and the agent's ``train`` request
checker (``budget_w`` / ``budget_schedule``). The expected verdicts are written out by hand
below, not derived from the parser: the grammar is ``fleet/method/budget.py``'s docstring.
A refusal must be one line whose text after the field's name is the same on every surface,
and a command must exit 2 without a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clients import records
from fleet.agent.protocol.train_args import closed_loop_args
from fleet.agent.protocol.wire import ProtocolError
from fleet.common.errors import InputError
from fleet.config.fleetfile import load_fleet
from fleet.method.budget import BudgetStep, ScheduleBudget

ROOT = Path(__file__).resolve().parents[1]
REFUSED = object()

# string -> watts (None: no limit) or REFUSED, as a fixed budget (--budget-w, budget_w, ...)
FIXED = {
    "4.5 W": 4.5,  # the unit is allowed, with or without a space
    "4.5W": 4.5,
    "600:4.5,0:7": REFUSED,
    " 7 ": 7.0,  # surrounding spaces are not part of the value
    "7,5": REFUSED,  # a decimal comma is not a decimal point
    "-1": REFUSED,
    "nan": REFUSED,
    "0:7,0:5": REFUSED,
    "0": REFUSED,
    "": REFUSED,
    "none": None,
    "inf": None,
    "7": 7.0,
    "4.5": 4.5,
    "0:7,600:4.5": REFUSED,
    "abc": REFUSED,
}
# string -> steps or REFUSED, as a schedule (--budget-schedule, budget_schedule, ...)
SCHEDULE = {s: REFUSED for s in FIXED}
SCHEDULE["0:7,600:4.5"] = (BudgetStep(0.0, 7.0), BudgetStep(600.0, 4.5))
SCHEDULE["0:4.5 W,60:none"] = (BudgetStep(0.0, 4.5), BudgetStep(60.0, None))

PROFILE = [  # every point fits 4.5 W: an accepted budget always selects
    {"batch_size": b, "freq_mhz": f, "time_per_batch_s": t, "peak_power_w": p, "mean_power_w": p}
    for b, f, t, p in ((8, 100, 0.2, 2.0), (8, 200, 0.1, 3.0), (16, 100, 0.3, 3.5),
                       (16, 200, 0.15, 4.0))
]  # fmt: skip
EFFICIENCY = {8: 1000.0, 16: 1200.0}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("grammar")
    cols = list(PROFILE[0])
    (d / "p.csv").write_text(
        ",".join(cols) + "\n" + "".join(",".join(str(r[c]) for c in cols) + "\n" for r in PROFILE)
    )
    (d / "e.csv").write_text(
        "batch_size,samples_to_accuracy\n" + "".join(f"{b},{n}\n" for b, n in EFFICIENCY.items())
    )
    # train stops right after reading its budget: no batch size of this vector reached the target
    (d / "unreached.csv").write_text("batch_size,samples_to_accuracy\n8,\n")
    return {"dir": d, "profile": d / "p.csv", "eff": d / "e.csv", "unreached": d / "unreached.csv"}


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "fleet", *args], capture_output=True, text=True, env=env,
        timeout=120, cwd=str(ROOT),
    )  # fmt: skip


def _refusal(proc: subprocess.CompletedProcess) -> str:
    """A command's refusal: exit 2, one line on stderr, no traceback."""
    err = proc.stderr.strip()
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and len(err.splitlines()) == 1, proc.stderr
    return err


def _select(files, text: str) -> object:
    proc = _cli("select", "--profile", str(files["profile"]), "--efficiency", str(files["eff"]),
                f"--budget-w={text}", "--json")  # fmt: skip
    if proc.returncode == 0:
        return json.loads(proc.stdout)["budget_w"]
    return _refusal(proc)


def _train(files, flag: str, text: str) -> object:
    """``powerfleet train`` as far as its budget: accepted when it goes on to the efficiency."""
    proc = _cli("train", "--backend", "replay", "--replay-profile", str(files["profile"]),
                "--model", "small_cnn", "--dataset", str(files["dir"] / "none.npz"),
                "--efficiency", str(files["unreached"]), f"{flag}={text}")  # fmt: skip
    err = _refusal(proc)
    return "accepted" if "no batch size reached the target accuracy" in err else err


def _toml(files, key: str, text: str) -> object:
    path = files["dir"] / "fleet.toml"
    path.write_text(
        '[run]\nmodel = "m"\nefficiency = "e.csv"\ntarget_accuracy = 0.9\n'
        f'[[devices]]\nname = "n"\ntype = "cpu"\n{key} = {json.dumps(text)}\n'
        'profile = "p.csv"\ndata = "e.csv"\n'
    )
    try:
        spec = load_fleet(path).devices[0]
    except InputError as exc:
        return str(exc)
    return spec.budget_w if key == "budget_w" else spec.schedule


def _node_config(key: str, text: str) -> object:
    nc = {"device-name": "n", "device-type": "cpu", key: text, "profile": "/p.csv"}
    try:
        spec = records.spec_from_node_config(nc)
    except InputError as exc:
        return str(exc)
    return spec.budget_w if key == "budget-w" else spec.schedule


def _agent(key: str, text: str) -> object:
    req = {key: text, "profile": PROFILE, "efficiency": {str(b): n for b, n in EFFICIENCY.items()}}
    try:
        plan = closed_loop_args(req)
        assert plan is not None
        source = plan.source
    except ProtocolError as exc:
        return str(exc)
    if isinstance(source, ScheduleBudget):
        return tuple(source.steps)
    return source.budget_at(0.0)


def _tails(got: dict[str, object]) -> set[str]:
    """Each refusal's words after its field's name (the surface's own prefix taken off)."""
    tails = set()
    for field, line in got.items():
        assert isinstance(line, str) and "\n" not in line, (field, line)
        assert field in line, (field, line)
        tails.add(line[line.rindex(field) + len(field) :])
    return tails


@pytest.mark.parametrize("text", list(FIXED), ids=[repr(s) for s in FIXED])
def test_a_fixed_budget_reads_the_same_on_every_surface(files, text):
    expected = FIXED[text]
    got = {
        "--budget-w": _select(files, text),
        "--budget-w ": _train(files, "--budget-w", text),  # train: same flag, its own process
        "budget_w": _toml(files, "budget_w", text),
        "budget-w": _node_config("budget-w", text),
        "budget_w ": _agent("budget_w", text),
    }
    if expected is REFUSED:
        tails = _tails({k.strip(): v for k, v in got.items() if k != "budget_w "})
        tails |= _tails({"budget_w": got["budget_w "]})
        assert len(tails) == 1, got  # one error text
        (tail,) = tails
        assert tail == f": {text!r} is not a budget; expected watts > 0 (e.g. 7, 4.5 or 4.5 W) " \
            "or none/unlimited/inf"  # fmt: skip
    else:
        assert got == {
            "--budget-w": expected,
            "--budget-w ": "accepted",
            "budget_w": expected,
            "budget-w": expected,
            "budget_w ": expected,
        }


@pytest.mark.parametrize("text", list(SCHEDULE), ids=[repr(s) for s in SCHEDULE])
def test_a_budget_schedule_reads_the_same_on_every_surface(files, text):
    expected = SCHEDULE[text]
    got = {
        "--budget-schedule": _train(files, "--budget-schedule", text),
        "budget_schedule": _toml(files, "budget_schedule", text),
        "budget-schedule": _node_config("budget-schedule", text),
        "budget_schedule ": _agent("budget_schedule", text),
    }
    if expected is REFUSED:
        tails = _tails({k: v for k, v in got.items() if k != "budget_schedule "})
        tails |= _tails({"budget_schedule": got["budget_schedule "]})
        assert len(tails) == 1, got
    else:
        assert got == {
            "--budget-schedule": "accepted",
            "budget_schedule": expected,
            "budget-schedule": expected,
            "budget_schedule ": expected,
        }


@pytest.mark.parametrize(
    "text, words",
    [
        ("600:4.5,0:7", "the first step must start at 0 s, not 600 s"),  # refused, not sorted
        ("0:7,0:5", "times must strictly increase, but 0 s follows 0 s"),
        ("0:7,600:4.5,300:3", "times must strictly increase, but 300 s follows 600 s"),
        ("0:7,600:abc", "step 2: 'abc' is not a budget"),
        ("0:7,", "'' is not SECONDS:WATTS"),
        ("", "empty schedule"),
        ("7", "'7' is not SECONDS:WATTS"),
    ],
)
def test_schedule_refusals_say_what_is_wrong(text, words):
    msg = _node_config("budget-schedule", text)
    assert isinstance(msg, str) and msg.startswith("node config of n: budget-schedule")
    assert words in msg, msg


def test_the_agent_profile_command_reads_budgets_by_the_same_grammar():
    from fleet.agent.protocol.device_commands import _budgets

    assert _budgets(["4.5 W", 7, None, "none"]) == [4.5, 7.0, None, None]
    with pytest.raises(ProtocolError) as err:
        _budgets(["7,5"])
    assert str(err.value) == (
        "adapt_budgets: '7,5' is not a budget; expected watts > 0 (e.g. 7, 4.5 or 4.5 W) "
        "or none/unlimited/inf"
    )

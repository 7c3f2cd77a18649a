"""What a `flwr run` shows: plain lines, Flower's and Ray's noise counted in one line, the
result table, and one clear line when the federation and the fleet differ in size (issue 31,
finding 3).

The coordinator's own code (``strategies/server_app.run_fleet``) runs over the in-process grid
(``tests/inprocess_grid.py``: the real ClientApp, Flower's dispatch, no Ray), with as many
simulated SuperNodes as a `--federation-config "num-supernodes=N"` would give.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

import pytest

from fleet.config.fleetfile import load_fleet
from strategies import flower_output
from strategies.server_app import ServerSettings, run_fleet
from tests.inprocess_grid import InProcessGrid, app_identity

DEFAULT = Path(__file__).resolve().parents[1] / "simulations" / "fleets" / "default.toml"
RAY_FILE = "/venv/lib/python3.11/site-packages/ray/_private/worker.py"


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def run(tmp_path: Path, nodes: int) -> tuple[dict, list[str]]:
    """The default fleet (8 devices) on ``nodes`` simulated SuperNodes; (report, log lines)."""
    handler = Lines()
    logger = logging.getLogger("flwr")
    logger.addHandler(handler)
    try:
        with app_identity():
            settings = ServerSettings(str(DEFAULT), str(tmp_path / "run"), poll_s=0.0)
            report = run_fleet(InProcessGrid(nodes), settings)
    finally:
        logger.removeHandler(handler)
    return report, handler.lines


@pytest.mark.slow
@pytest.mark.timeout(240)  # without the size check, the round would wait node-wait-s (300 s)
def test_a_smaller_federation_loses_the_devices_without_a_supernode_at_once(tmp_path):
    report, lines = run(tmp_path, 3)
    names = [d.name for d in load_fleet(DEFAULT).devices]
    rows = {r["device"]: r for r in report["devices"]}
    assert list(rows) == names
    assert [rows[n]["status"] for n in names[:3]] == ["ok", "ok", "ok"]
    for n in names[3:]:
        assert rows[n]["status"] == "lost"
        assert "the simulation has 3 for 8 devices" in rows[n]["message"]
        assert '--federation-config "num-supernodes=8"' in rows[n]["message"]
    said = [line for line in lines if "cannot run" in line]
    assert len(said) == 1 and said[0].startswith("powerfleet: 5 device(s) cannot run")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_spare_supernodes_stay_idle_and_are_said_once(tmp_path, capsys):
    report, lines = run(tmp_path, 10)
    statuses = {r["device"]: r["status"] for r in report["devices"]}
    assert len(statuses) == 8 and statuses.pop("nano-starved") == "infeasible"
    assert set(statuses.values()) == {"ok"}
    spare = [line for line in lines if "SuperNodes have no device" in line]
    assert spare == [
        "powerfleet: 2 of the 10 SuperNodes have no device (the fleet lists 8): idle; size it "
        'to the fleet: flwr run ... --federation-config "num-supernodes=8"'
    ]
    assert not [line for line in lines if "partition-id" in line]  # no line per spare node
    # the run ends with the table `powerfleet simulate` prints, as plain text
    out = capsys.readouterr().out
    assert "mixed-nano-tx2nx: 8 devices, resnet18, target 0.92, engine flower" in out
    assert f"report: {tmp_path / 'run'}/report.json, devices.csv" in out
    assert "fleet: 8 devices (ok: 7, infeasible: 1)" in out
    assert "\x1b[" not in out


@pytest.fixture()
def hook(monkeypatch):
    """flower_output's hook installed for one test; Flower's handler, the count and the
    environment restored."""
    from flwr.supercore.logger import console_handler

    monkeypatch.setenv("RAY_COLOR_PREFIX", "x")  # recorded, so the test's value is undone
    monkeypatch.delenv("RAY_COLOR_PREFIX")

    colored = console_handler.colored
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        flower_output._filtered.clear()
        yield
        flower_output._filtered.clear()
    console_handler.colored = colored


def test_flower_and_ray_future_warnings_are_counted_in_one_line(hook):
    shown = []
    saved = flower_output._original_showwarning
    flower_output._original_showwarning = lambda *a, **k: shown.append(a[1].__name__)
    try:
        flower_output.install(env={})
        tip = "Tip: In future versions of Ray, Ray will no longer override accelerator"
        for _ in range(2):
            warnings.warn_explicit(tip, FutureWarning, RAY_FILE, 2051)
        warnings.warn_explicit("old api", DeprecationWarning, "/x/flwr/common/old.py", 1)
        warnings.warn_explicit("a real problem", UserWarning, RAY_FILE, 1)  # not noise
        warnings.warn_explicit("ours", FutureWarning, "/x/fleet/core/profile.py", 1)  # not noise
    finally:
        flower_output._original_showwarning = saved
    assert shown == ["UserWarning", "FutureWarning"]
    line = flower_output.summary()
    assert line is not None and "\n" not in line
    assert line.startswith("filtered 3 Flower/Ray warning(s) that do not concern this run: ")
    assert "flwr DeprecationWarning: old api" in line
    assert f"ray FutureWarning: {tip[:60]}" in line and "(x2)" in line


def test_nothing_filtered_says_nothing(hook):
    assert flower_output.summary() is None


def test_plain_log_lines_unless_colour_is_forced(hook):
    from flwr.supercore.logger import console_handler

    flower_output.install(env={"TERM": "xterm-256color"})
    assert console_handler.colored is False
    assert os.environ["RAY_COLOR_PREFIX"] == "0"  # Ray's driver prints its workers' lines plain
    record = logging.LogRecord("flwr", logging.INFO, "x", 1, "hello", None, None)
    assert "\x1b[" not in console_handler.format(record)
    console_handler.colored = True
    del os.environ["RAY_COLOR_PREFIX"]
    flower_output.install(env={"FORCE_COLOR": "1"})
    assert console_handler.colored is True and "RAY_COLOR_PREFIX" not in os.environ

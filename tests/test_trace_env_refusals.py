"""Power traces, live budget files and environment variables: bad input is one line, exit 2.

Each case is an audit finding and what it used to get: a UnicodeDecodeError traceback for a
trace that is not UTF-8 (through a fleet file, the codec's words with no file named), a row with
a cell too many or a header naming a column twice taken silently, ``POWERFLEET_OFFLINE=false``
meaning offline, a ``POWERFLEET_DATA`` of ``~nobody`` a traceback and one naming a file every
dataset "missing" with exit 0, and a live budget file cut at 256 bytes (9 W padded past the
limit read as 90 W). Commands run in process (``fleet.cli.main``), as the entry point runs them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleet.budgets.trace import load_trace
from fleet.cli import main
from fleet.common.errors import InputError
from fleet.config.fleetfile import load_fleet
from fleet.data.canonical import offline
from fleet.method.budget import BUDGET_FILE_MAX_BYTES, BudgetError, FileBudget, read_budget_file
from fleet.training.estimate import default_cache_dir
from tests.conftest import ROOT
from tests.refusal_helpers import one_line

SIM = ROOT / "simulations"
PROFILE = SIM / "profiles" / "nano_resnet18.csv"
EFFICIENCY = SIM / "efficiency" / "resnet18_cifar10-proxy.csv"
TRAIN = [
    "train", "--backend", "replay", "--replay-profile", str(PROFILE), "--model", "resnet18",
    "--dataset", "mnist-5k", "--efficiency", str(EFFICIENCY),
]  # fmt: skip
NOBODY = "~powerfleet-no-such-user"


def fleet_with_trace(tmp: Path, trace: Path) -> Path:
    path = tmp / "solar.toml"
    path.write_text(
        f'[run]\nmodel = "resnet18"\nefficiency = "{EFFICIENCY}"\ntarget_accuracy = 0.92\n'
        f'[[devices]]\nname = "n"\ntype = "jetson-nano"\nbudget_trace = "{trace}"\n'
        f'profile = "{PROFILE}"\ndata = "{SIM / "efficiency" / "resnet18_svhn.csv"}"\n'
    )
    return path


# ------------------------------------------------------------------------------ power traces


NOT_UTF8 = {
    "binary": b"\xff\xfetime_s,available_w\n0,5\n",
    "utf-16 without a BOM": "time_s,available_w\n0,5\n".encode("utf-16-le"),
}


@pytest.mark.parametrize("data", NOT_UTF8.values(), ids=NOT_UTF8.keys())
def test_a_trace_that_is_not_utf8_text_is_refused_naming_it_on_every_surface(
    capsys, tmp_path, data
):
    trace = tmp_path / "panel.csv"
    trace.write_bytes(data)
    said = f"{trace}: not a UTF-8 text file (a power trace CSV: time_s, available_w)"
    live = tmp_path / "budget_w"
    feed = ["budget-feed", "--budget-trace", str(trace), "--budget-file", str(live)]
    one_line(capsys, feed, "--budget-trace: " + said)
    assert not live.exists()
    one_line(capsys, [*TRAIN, "--budget-trace", str(trace)], said)
    with pytest.raises(InputError) as exc:
        load_fleet(fleet_with_trace(tmp_path, trace))
    assert "(n): budget_trace: " + said in str(exc.value)


def test_a_spreadsheets_utf8_bom_is_still_a_trace(tmp_path):
    trace = tmp_path / "panel.csv"
    trace.write_bytes("time_s,available_w\n0,5\n60,4\n".encode("utf-8-sig"))
    assert load_trace(trace) == [(0.0, 5.0), (60.0, 4.0)]


@pytest.mark.parametrize("text, needle", [
    ("time_s,available_w\n0,5\n60,5,7\n", "line 3: 3 cell(s), the header (line 1) has 2"),
    ("# panel\ntime_s,available_w,note\n0,5,sun\n60,4\n",
     "line 4: 2 cell(s), the header (line 2) has 3"),
    ("time_s,available_w,available_w\n0,5,7\n",
     "line 1: column 'available_w' appears twice in the header"),
    ("time_s,time_s,available_w\n0,1,5\n", "line 1: column 'time_s' appears twice"),
])  # fmt: skip
def test_a_row_or_header_that_does_not_line_up_is_refused_naming_the_line(
    capsys, tmp_path, text, needle
):
    trace = tmp_path / "panel.csv"
    trace.write_text(text)
    with pytest.raises(InputError, match=re.escape("panel.csv: " + needle)):
        load_trace(trace)
    one_line(capsys, [*TRAIN, "--budget-trace", str(trace)], f"{trace}: {needle}")


def test_a_trace_with_a_note_column_on_every_row_is_read(tmp_path):
    trace = tmp_path / "panel.csv"
    trace.write_text("time_s,available_w,note\n0,5,sun\n60,4,cloud\n")
    assert load_trace(trace) == [(0.0, 5.0), (60.0, 4.0)]


# -------------------------------------------------------------------------- live budget file


def test_a_budget_file_longer_than_the_limit_is_refused_not_cut(capsys, tmp_path):
    live = tmp_path / "budget_w"
    live.write_bytes(b"0" * 254 + b"90e-1\n")  # 9 W; cut at 256 bytes it read "0...090": 90 W
    with pytest.raises(BudgetError, match=f"longer than {BUDGET_FILE_MAX_BYTES} bytes"):
        read_budget_file(str(live))
    said = f"budget file {live}: longer than 256 bytes; a budget file holds one budget"
    one_line(capsys, [*TRAIN, "--budget-file", str(live)], said)
    live.write_bytes(b" " * (BUDGET_FILE_MAX_BYTES - 4) + b"4.5\n")  # exactly at the limit
    assert read_budget_file(str(live)) == 4.5


def test_a_running_loop_keeps_its_budget_when_the_file_grows_past_the_limit(tmp_path):
    live = tmp_path / "budget_w"
    live.write_text("4.5\n")
    now = [0.0]
    warned: list[str] = []
    source = FileBudget(str(live), reread_s=1.0, warn=warned.append, clock=lambda: now[0])
    live.write_bytes(b"0" * 255 + b"75\n")  # 75 W, which the cut read as 7 W
    now[0] = 2.0
    assert source.budget_at(2.0) == 4.5
    assert len(warned) == 1 and "longer than 256 bytes" in warned[0], warned
    assert "keeping 4.5 W" in warned[0]
    live.write_text("7\n")
    now[0] = 4.0
    assert source.budget_at(4.0) == 7.0


def test_a_budget_file_that_is_not_utf8_is_refused_naming_it(capsys, tmp_path):
    live = tmp_path / "budget_w"
    live.write_bytes("4.5\n".encode("utf-16"))
    one_line(capsys, [*TRAIN, "--budget-file", str(live)], f"budget file {live}: not a UTF-8 text")


# ----------------------------------------------------------------------- environment variables


@pytest.mark.parametrize("value, on", [
    ("1", True), ("true", True), ("YES", True), (" On ", True),
    ("", False), ("0", False), ("false", False), ("No", False), ("off", False),
])  # fmt: skip
def test_powerfleet_offline_takes_the_usual_switch_words(monkeypatch, value, on):
    monkeypatch.setenv("POWERFLEET_OFFLINE", value)
    assert offline() is on


@pytest.mark.parametrize("value", ["maybe", "2", "offline"])
def test_powerfleet_offline_that_is_no_switch_word_is_refused_before_any_work(
    capsys, monkeypatch, tmp_path, value
):
    monkeypatch.setenv("POWERFLEET_OFFLINE", value)
    data = tmp_path / "data"
    said = f"POWERFLEET_OFFLINE={value!r}: expected 1/true/yes/on or 0/false/no/off"
    one_line(capsys, ["data", "prepare", "mnist-5k", "--data-dir", str(data)], said)
    assert not data.exists()
    one_line(capsys, ["data", "list", "--data-dir", str(data)], said)  # list says it too


def test_powerfleet_data_that_cannot_be_a_folder_is_one_line(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("POWERFLEET_DATA", NOBODY + "/data")
    one_line(capsys, ["data", "list"], f"POWERFLEET_DATA='{NOBODY}/data': cannot expand {NOBODY}")
    afile = tmp_path / "data"
    afile.write_text("not a folder\n")
    monkeypatch.setenv("POWERFLEET_DATA", str(afile))
    one_line(capsys, ["data", "list"], f"POWERFLEET_DATA='{afile}': is a file, not a folder")
    one_line(capsys, [*TRAIN, "--budget-w", "5"], "POWERFLEET_DATA=", "is a file, not a folder")


def test_powerfleet_data_expands_home_and_may_not_exist_yet(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("POWERFLEET_DATA", "~/data")
    assert main(["data", "list", "--json"]) == 0
    assert str(tmp_path / "data") in capsys.readouterr().out


def test_powerfleet_cache_that_cannot_be_a_folder_is_refused(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("POWERFLEET_CACHE", NOBODY)
    with pytest.raises(InputError, match=f"POWERFLEET_CACHE='{NOBODY}': cannot expand"):
        default_cache_dir()
    afile = tmp_path / "cache"
    afile.write_text("")
    monkeypatch.setenv("POWERFLEET_CACHE", str(afile))
    argv = ["estimate", "--model", "small_cnn", "--dataset", "mnist-5k", "--batch-sizes", "4",
            "--target-accuracy", "0.9", "--out", str(tmp_path / "eff.csv")]  # fmt: skip
    one_line(capsys, argv, f"POWERFLEET_CACHE='{afile}': is a file, not a folder")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("POWERFLEET_CACHE", "~/c")  # expanded, no longer a folder named "~"
    assert default_cache_dir() == tmp_path / "c" / "estimates"

"""The budget grammar (fleet.method.budget): one vocabulary, one exact text form everywhere.

The same words must mean the same budget on the command line, in the fleet TOML and in a
SuperNode's node config, and what the fleet writes into a node config must read back as the
very same number (a budget 4.4999996 W written as "4.5" would let the device run over it).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from clients import records
from fleet.cli import main
from fleet.common.errors import InputError
from fleet.config.fleetfile import DeviceSpec, load_fleet
from fleet.method.budget import (
    MAX_STEP_S,
    MAX_WATTS,
    BudgetStep,
    format_budget,
    format_schedule,
    parse_budget,
    parse_schedule,
)

watts = st.floats(min_value=0, max_value=MAX_WATTS, exclude_min=True, allow_nan=False)
budgets = st.one_of(st.none(), watts)
seconds = st.floats(min_value=0, max_value=MAX_STEP_S, allow_nan=False)


@given(budgets)
@example(4.4999996)
@example(5e-324)
@example(MAX_WATTS)
@example(0.1 + 0.2)
def test_budget_text_round_trips_exactly(budget: float | None) -> None:
    text = format_budget(budget)
    assert parse_budget(text) == budget


@given(st.lists(st.tuples(seconds, budgets), min_size=0, max_size=6), budgets)
@example([(600.0, 4.4999996)], 7.0)
def test_schedule_text_round_trips_exactly(later, first) -> None:
    steps = {0.0: first}
    for at, w in later:
        if at > 0:
            steps.setdefault(at, w)
    schedule = tuple(BudgetStep(at, w) for at, w in sorted(steps.items()))
    assert parse_schedule(format_schedule(schedule)) == schedule


@given(budgets, st.lists(st.tuples(seconds, budgets), max_size=4))
@example(4.4999996, [])
@example(None, [(600.0, 4.4999996)])
def test_node_config_round_trips_every_budget_and_schedule(budget, later) -> None:
    schedule: tuple[BudgetStep, ...] = ()
    if later:
        steps = {0.0: budget}
        for at, w in later:
            steps.setdefault(at, w)
        schedule = tuple(BudgetStep(at, w) for at, w in sorted(steps.items()))
    spec = DeviceSpec("n", "jetson-nano", budget, "/p.csv", "/d.csv", schedule)
    assert records.spec_from_node_config(spec.to_node_config()) == spec


# ------------------------------------------------------------------- one vocabulary everywhere

ACCEPTED = {
    "none": None,
    "NONE": None,
    "Unlimited": None,
    "inf": None,
    "Infinity": None,
    " 4.5 ": 4.5,
    "7": 7.0,
    "1e1": 10.0,
    "4.4999996": 4.4999996,
    "4.5W": 4.5,
    "4.5 w": 4.5,
}
REFUSED = ["0", "-1", "-2.5", "nan", "-inf", "n/a", "na", "", "lots", "W", "none W", "0x10", "1_0"]


def _cli(tmp_path, word: str, capsys) -> float | None | InputError:
    prof = tmp_path / "p.csv"
    prof.write_text("batch_size,freq_mhz,time_per_batch_s,peak_power_w\n8,100,0.1,1.0\n")
    eff = tmp_path / "e.csv"
    eff.write_text("batch_size,samples_to_accuracy\n8,100\n")
    # --budget-w=WORD: argparse would take a lone "-inf" for an option
    code = main(["select", "--profile", str(prof), "--efficiency", str(eff), f"--budget-w={word}",
                 "--json"])  # fmt: skip
    out, err = capsys.readouterr()
    if code != 0:
        assert code == 2 and len(err.strip().splitlines()) == 1 and "--budget-w" in err, err
        return InputError(err)
    return json.loads(out)["budget_w"]


def _toml(tmp_path, word: str) -> float | None | InputError:
    (tmp_path / "p.csv").write_text("batch_size,freq_mhz,time_per_batch_s,peak_power_w\n8,1,1,1\n")
    (tmp_path / "e.csv").write_text("batch_size,samples_to_accuracy\n8,100\n")
    (tmp_path / "f.toml").write_text(
        '[run]\nmodel = "m"\nefficiency = "e.csv"\ntarget_accuracy = 0.9\n'
        f'[[devices]]\nname = "n"\ntype = "cpu"\nbudget_w = {json.dumps(word)}\n'
        'profile = "p.csv"\ndata = "e.csv"\n'
    )
    try:
        return load_fleet(tmp_path / "f.toml").devices[0].budget_w
    except InputError as exc:
        assert "f.toml" in str(exc)
        return exc


def _node_config(word: str) -> float | None | InputError:
    nc = {"device-name": "n", "device-type": "cpu", "budget-w": word, "profile": "/p.csv"}
    try:
        return records.spec_from_node_config(nc).budget_w
    except InputError as exc:
        assert "budget-w" in str(exc) or "budget" in str(exc)
        return exc


@pytest.mark.parametrize("word", [*ACCEPTED, *REFUSED])
def test_every_surface_accepts_and_refuses_the_same_words(tmp_path, capsys, word) -> None:
    got = [_cli(tmp_path, word, capsys), _toml(tmp_path, word), _node_config(word)]
    if word in ACCEPTED:
        assert got == [ACCEPTED[word]] * 3, got
    else:
        assert all(isinstance(g, InputError) for g in got), got


def test_toml_numbers_and_infinity_mean_what_the_words_mean(tmp_path) -> None:
    (tmp_path / "p.csv").write_text("batch_size,freq_mhz,time_per_batch_s,peak_power_w\n8,1,1,1\n")
    (tmp_path / "e.csv").write_text("batch_size,samples_to_accuracy\n8,100\n")
    dev = (
        '[[devices]]\nname = "{n}"\ntype = "cpu"\nbudget_w = {b}\n'
        'profile = "p.csv"\ndata = "e.csv"\n'
    )
    (tmp_path / "f.toml").write_text(
        '[run]\nmodel = "m"\nefficiency = "e.csv"\ntarget_accuracy = 0.9\n'
        + dev.format(n="a", b="4.4999996")
        + dev.format(n="b", b="inf")
        + dev.format(n="c", b="7")
    )
    got = [d.budget_w for d in load_fleet(tmp_path / "f.toml").devices]
    assert got == [4.4999996, None, 7.0]
    for bad in ("0", "-inf", "nan", "true"):
        (tmp_path / "g.toml").write_text(
            '[run]\nmodel = "m"\nefficiency = "e.csv"\ntarget_accuracy = 0.9\n'
            + dev.format(n="a", b=bad)
        )
        with pytest.raises(InputError, match="g.toml"):
            load_fleet(tmp_path / "g.toml")


def test_old_minus_one_sentinel_is_no_longer_a_budget() -> None:
    nc = {"device-name": "n", "device-type": "cpu", "budget-w": -1.0, "profile": "/p.csv"}
    with pytest.raises(InputError, match="is not a budget"):
        records.spec_from_node_config(nc)

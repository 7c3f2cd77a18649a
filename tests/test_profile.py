import math

import pytest

from fleet.common.errors import InfeasibleError, InputError
from fleet.core.profile import frontier, load_profile, require_feasible, save_profile

HEADER = "batch_size,freq_mhz,time_per_batch_s,peak_power_w,mean_power_w"


def test_load_roundtrip_keeps_points_metadata_and_failures(write, tmp_path):
    src = write(
        "p.csv",
        HEADER + ",device,model,status,extra",
        [
            "8,307.2,0.1,4.0,3.5,jetson-nano,resnet18,ok,x",
            "8,460.8,0.07,4.8,,jetson-nano,resnet18,ok,y",
            "256,307.2,,,,jetson-nano,resnet18,oom,z",
        ],
        comments=["measured on a bench"],
    )
    prof = load_profile(src)
    assert prof.batch_sizes == [8]
    assert prof.freqs_mhz == [307.2, 460.8]
    assert prof.failed == [(256, 307.2, "oom")]
    assert prof.metadata["device"] == "jetson-nano"
    # mean power falls back to peak when the cell is empty
    assert prof.point(8, 460.8).mean_power_w == 4.8
    out = tmp_path / "out.csv"
    save_profile(prof, out)
    again = load_profile(out)
    assert again.points == prof.points
    assert again.failed == prof.failed
    assert again.metadata["model"] == "resnet18"
    assert "measured on a bench" in out.read_text()


def test_frontier_takes_fastest_feasible_not_highest_frequency(write):
    # Noisy profile: at 921.6 MHz the step measured slower than at 844.8 MHz.
    src = write(
        "p.csv",
        HEADER,
        [
            "32,768.0,0.30,5.0,4.0",
            "32,844.8,0.25,5.5,4.5",
            "32,921.6,0.26,5.9,4.9",
            "64,768.0,0.50,6.5,6.0",
            "64,844.8,0.45,5.8,5.2",  # non-monotone power: lower peak at higher f
        ],
    )
    prof = load_profile(src)
    fr = frontier(prof, 6.0)
    assert fr[32].freq_mhz == 844.8  # fastest, though 921.6 also fits
    assert fr[64].freq_mhz == 844.8  # 768 breaks the budget, 844.8 fits
    assert set(frontier(prof, 5.0)) == {32}
    assert frontier(prof, 5.0)[32].freq_mhz == 768.0
    assert frontier(prof, None)[64].time_per_batch_s == 0.45


def test_budget_below_every_peak_names_lowest_peak(write):
    src = write("p.csv", HEADER, ["8,307.2,0.1,4.0,3.5", "16,307.2,0.15,4.3,3.9"])
    with pytest.raises(InfeasibleError, match=r"lowest measured peak power is 4 W at batch_size=8"):
        require_feasible(load_profile(src), 3.9)


@pytest.mark.parametrize("budget", [0, -1, math.nan])
def test_nonpositive_budget_rejected(write, budget):
    src = write("p.csv", HEADER, ["8,307.2,0.1,4.0,3.5"])
    with pytest.raises(InputError, match="is not a budget"):  # the one validator
        frontier(load_profile(src), budget)


@pytest.mark.parametrize(
    "header,rows,message",
    [
        ("batch_size,freq_mhz,time_per_batch_s", ["8,307,0.1"], "missing column(s) peak_power_w"),
        (HEADER, ["8,307,abc,4,3"], "line 2: time_per_batch_s='abc' is not a number"),
        (HEADER, ["8.5,307,0.1,4,3"], "line 2: batch_size='8.5' is not an integer"),
        (HEADER, ["8,307,-0.1,4,3"], "line 2: time_per_batch_s=-0.1 must be >= 1e-06"),
        (HEADER, ["8,307,0.1,-4,3"], "line 2: peak_power_w=-4 must be > 0"),
        (HEADER, ["8,307,0.1,4,3", "8,307.0,0.2,4,3"], "line 3: duplicate point batch_size=8"),
        (HEADER, ["8,307,0.1,4"], "line 2: expected 5 cells as in the header, got 4"),
        (HEADER, ["8,307,0.1,4,3", "16,307,0.1,,"], "time-only or fully powered"),
        (HEADER, [], "no usable rows"),
    ],
)
def test_malformed_profiles_give_one_line_naming_file_line_field(write, header, rows, message):
    src = write("bad.csv", header, rows)
    with pytest.raises(InputError) as info:
        load_profile(src)
    text = str(info.value)
    assert message in text
    assert str(src) in text
    assert "\n" not in text


def test_time_only_profile_refuses_budget_but_works_unlimited(write):
    src = write("cpu.csv", HEADER, ["8,2400,0.1,,", "16,2400,0.15,,"])  # a CPU: no power
    prof = load_profile(src)
    assert not prof.has_power
    assert set(frontier(prof, None)) == {8, 16}
    with pytest.raises(InputError, match="time-only"):
        frontier(prof, 5.0)


def test_missing_file_is_input_error(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        load_profile(tmp_path / "nope.csv")

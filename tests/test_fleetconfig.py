import pytest

from fleet.common.errors import InputError
from fleet.config.fleetfile import load_fleet


@pytest.fixture
def fleet_dir(tmp_path):
    (tmp_path / "p.csv").write_text("batch_size,freq_mhz,time_per_batch_s,peak_power_w\n8,1,1,1\n")
    (tmp_path / "e.csv").write_text("batch_size,samples_to_accuracy\n8,100\n")
    return tmp_path


def write(d, devices: str, run: str = "") -> str:
    text = (
        '[run]\nmodel = "resnet18"\nefficiency = "e.csv"\ntarget_accuracy = 0.9\n'
        + run
        + "\n"
        + devices
    )
    (d / "fleet.toml").write_text(text)
    return str(d / "fleet.toml")


DEV = (
    '[[devices]]\nname = "{name}"\ntype = "{type}"\nbudget_w = {budget}\nprofile = "p.csv"\n'
    'data = "e.csv"\n{extra}\n'
)


def dev(name="n1", type="jetson-nano", budget="4.5", extra=""):
    return DEV.format(name=name, type=type, budget=budget, extra=extra)


def test_load_resolves_paths_counts_and_budgets(fleet_dir):
    f = load_fleet(write(fleet_dir, dev() + dev("big", "jetson-tx2nx", '"none"', "count = 3")))
    assert [d.name for d in f.devices] == ["n1", "big-0001", "big-0002", "big-0003"]
    assert f.devices[0].budget_w == 4.5 and f.devices[1].budget_w is None
    assert f.devices[0].profile == str(fleet_dir / "p.csv")
    assert f.run.mode == "local" and f.run.objective == "time"
    nc = f.devices[0].to_node_config()
    assert nc["device-name"] == "n1" and nc["budget-w"] == "4.5"  # the codec's exact text


def test_schedule_in_order_read_and_unsorted_refused(fleet_dir):
    """An unsorted schedule is refused, not sorted: a typo in a timetable should be seen."""
    unsorted = dev(extra="budget_schedule = [[600, 4.5], [0, 7]]").replace("budget_w = 4.5\n", "")
    with pytest.raises(InputError, match="budget_schedule: the first step must start at 0 s"):
        load_fleet(write(fleet_dir, unsorted))
    f = load_fleet(
        write(
            fleet_dir,
            dev(extra="budget_schedule = [[0, 7], [600, 4.5]]").replace("budget_w = 4.5\n", ""),
        )
    )
    steps = f.devices[0].schedule
    assert [(s.at_s, s.budget_w) for s in steps] == [(0.0, 7.0), (600.0, 4.5)]
    assert f.devices[0].budget_w == 7.0
    assert f.devices[0].to_node_config()["budget-schedule"] == "0:7,600:4.5"


@pytest.mark.parametrize(
    "devices,message",
    [
        (dev(type="raspberry-pi"), "unknown device type 'raspberry-pi'; expected one of"),
        (dev() + dev(), "duplicate device name 'n1'"),
        (dev(budget="0"), "is not a budget"),
        (dev(budget='"lots"'), "expected watts"),
        (dev().replace('profile = "p.csv"', 'profile = "missing.csv"'), "file not found"),
        (dev(extra="count = 0"), "field 'count' must be a positive integer, got 0"),
        (
            dev(extra="budget_schedule = [[5, 7]]").replace("budget_w = 4.5\n", ""),
            "first step must start at 0",
        ),
        ("", "no [[devices]] entries"),
    ],
)
def test_bad_fleet_files(fleet_dir, devices, message):
    path = write(fleet_dir, devices)
    with pytest.raises(InputError) as info:
        load_fleet(path)
    assert message in str(info.value) and "fleet.toml" in str(info.value)


def test_bad_run_settings(fleet_dir):
    with pytest.raises(InputError, match="field 'mode' must be one of local, federated"):
        load_fleet(write(fleet_dir, dev(), 'mode = "gossip"'))
    (fleet_dir / "x.toml").write_text("[run\n")
    with pytest.raises(InputError, match="not valid TOML"):
        load_fleet(fleet_dir / "x.toml")

"""The board's systemd units run real commands, in the right order.

Why: a unit is installed once and read by nobody until a board reboots after a power cut; an
ExecStart with a flag that no longer exists fails then, on every board at once. Both units are
parsed as systemd reads them (sections, keys), their ExecStart lines are split as systemd
splits them and parsed by the real ``powerfleet`` parser, and the device unit is ordered after
(and requires) the restore unit, with the same state directory, so a crash's saved clocks are
put back before the board trains again.
"""

import configparser
import shlex

from fleet.cli import build_parser
from tests.conftest import ROOT

UNITS = ROOT / "deployment" / "systemd"
RESTORE = "powerfleet-restore.service"
DEVICE = "powerfleet-device.service"


def _unit(name: str) -> configparser.ConfigParser:
    cp = configparser.ConfigParser(interpolation=None, strict=True, delimiters=("=",))
    cp.optionxform = str  # systemd keys are case-sensitive
    cp.read_string((UNITS / name).read_text())
    assert {"Unit", "Service", "Install"} <= set(cp.sections()), name
    return cp


def _command(unit: configparser.ConfigParser):
    """ExecStart as the powerfleet parser reads it: (argv[0], the parsed namespace)."""
    argv = shlex.split(unit["Service"]["ExecStart"])
    assert argv[0].endswith("/powerfleet"), argv[0]
    return argv[0], build_parser(argv[1:]).parse_args(argv[1:])


def test_exec_start_lines_are_real_powerfleet_commands():
    _, restore = _command(_unit(RESTORE))
    assert restore.command == "restore" and restore.wait_s == 120
    _, device = _command(_unit(DEVICE))
    assert device.command == "device" and device.client == "hardware"
    assert device.backend in (None, "jetson")  # the default backend is the board's
    # the device's runs save clocks where the restore unit looks for them
    state_dir = getattr(device, "backend_opt_state-dir")  # a backend option (its own dest)
    assert state_dir == restore.state_dir == "/var/lib/powerfleet"


def test_the_device_unit_starts_after_the_restore_unit_and_restarts():
    unit = _unit(DEVICE)
    after = unit["Unit"]["After"].split()
    requires = unit["Unit"]["Requires"].split()
    assert RESTORE in after and RESTORE in requires
    svc = unit["Service"]
    assert svc["Restart"] in ("always", "on-failure") and int(svc["RestartSec"]) > 0
    assert "2" in svc["RestartPreventExitStatus"].split()  # bad input: a restart cannot fix it
    restore = _unit(RESTORE)
    assert restore["Service"]["Type"] == "oneshot"
    assert unit["Install"]["WantedBy"] == restore["Install"]["WantedBy"] == "multi-user.target"

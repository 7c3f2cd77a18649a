"""Backends describe themselves: every surface that names a backend is generated from its SPEC.

The toy backend below is one module written at test time plus one registry line; its option
must then appear, with no other change, in the `powerfleet profile` flags, the agent's argv
(built by the hardware client and parsed by the agent), the node-config keys the hardware client
reads, and the `powerfleet device` flags.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

import pytest

from clients.agent_link import AgentSettings, agent_command, node_config_keys
from deployment import cli as deploy_cli
from fleet.agent import __main__ as agent_main
from fleet.agent import devices
from fleet.cli import cmd_profile
from fleet.common.errors import InputError

TOY = textwrap.dedent(
    """
    from fleet.agent.devices.base import Backend, BackendSpec, Capabilities, Option


    class ToyBackend(Backend):
        name = "toy"

        def __init__(self, volts=5.0):
            self.volts = float(volts)

        def frequencies(self):
            return [100.0]

        def lock(self, freq_mhz):
            pass

        def restore(self):
            pass

        def read_power_w(self):
            return self.volts * 0.5


    SPEC = BackendSpec(
        name="toy",
        factory=ToyBackend,
        options=(Option("volts", float, "supply voltage", 5.0, public="toy-volts"),),
        capabilities=Capabilities(measures_power=True, locks_clocks=False, torch_device="cpu"),
        summary="a toy",
    )
    """
)


@pytest.fixture()
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "toy_backend_mod.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(devices.BACKENDS, "toy", "toy_backend_mod")  # the one registry line
    yield "toy"
    sys.modules.pop("toy_backend_mod", None)


def _sub(register) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    return parser


def test_toy_backend_reaches_every_surface(toy: str) -> None:
    # powerfleet profile
    args = _sub(cmd_profile.register).parse_args(
        ["profile", "--backend", "toy", "--toy-volts", "3.3", "--model", "m", "--out", "o.csv"]
    )
    assert cmd_profile.backend_options(args) == {"volts": 3.3}
    # the agent's argv, built by the hardware client and parsed by the agent itself
    argv = agent_command("/py", "toy", volts=3.3)
    assert argv == ["/py", "-m", "fleet.agent", "--backend", "toy", "--toy-volts", "3.3"]
    parsed = agent_main.build_parser().parse_args(argv[3:])
    assert agent_main.backend_options(parsed) == {"volts": 3.3}
    # node config keys the hardware client reads
    assert "toy-volts" in node_config_keys()
    settings = AgentSettings.from_node_config({"backend": "toy", "toy-volts": "3.3"})
    assert settings.options == {"volts": 3.3} and settings.argv()[-2:] == ["--toy-volts", "3.3"]
    # powerfleet device
    dev = _sub(deploy_cli.register_device).parse_args(
        ["device", "--fleet", "f.toml", "--name", "n", "--backend", "toy", "--toy-volts", "2"]
    )
    assert devices.given_options(dev) == {"toy-volts": 2.0}
    # and the registry opens it with its capabilities
    backend = devices.open_backend("toy", **settings.options)
    assert backend.read_power_w() == pytest.approx(1.65)
    assert devices.preferred_torch_device("toy", cuda_available=True) == "cpu"


def test_foreign_and_missing_options_are_refused_by_name(toy: str) -> None:
    args = _sub(cmd_profile.register).parse_args(
        ["profile", "--backend", "cpu", "--toy-volts", "3", "--model", "m", "--out", "o.csv"]
    )
    with pytest.raises(InputError, match="--toy-volts applies to --backend toy, not cpu"):
        cmd_profile.backend_options(args)
    with pytest.raises(InputError, match="node config: --rail applies to --backend jetson"):
        AgentSettings.from_node_config({"backend": "toy", "rail": "VDD_IN"})
    with pytest.raises(InputError, match="toy-volts='x', expected float"):
        AgentSettings.from_node_config({"backend": "toy", "toy-volts": "x"})
    with pytest.raises(InputError, match="--backend replay needs --profile-csv"):
        AgentSettings.from_node_config({"backend": "replay"})


def test_nvml_clock_changes_reachable_from_every_cli() -> None:
    args = _sub(cmd_profile.register).parse_args(
        ["profile", "--backend", "nvml", "--allow-clock-changes", "--gpu-index", "1",
         "--model", "m", "--out", "o.csv"]
    )  # fmt: skip
    assert cmd_profile.backend_options(args) == {"allow_clock_changes": True, "index": 1}
    argv = agent_command("/py", "nvml", allow_clock_changes=True, index=1)
    assert argv[3:] == ["--backend", "nvml", "--allow-clock-changes", "--gpu-index", "1"]
    parsed = agent_main.build_parser().parse_args(argv[3:])
    assert agent_main.backend_options(parsed) == {"allow_clock_changes": True, "index": 1}
    nc = {"backend": "nvml", "agent-python": "/py", "allow-clock-changes": "true", "gpu-index": 1}
    assert AgentSettings.from_node_config(nc).argv() == argv
    # off means off: the switch is not passed at all
    assert "--allow-clock-changes" not in agent_command("/py", "nvml", allow_clock_changes=False)


def test_device_types_map_to_registered_backends() -> None:
    assert set(devices.DEVICE_TYPES.values()) <= set(devices.BACKENDS)
    assert devices.backend_for_device_type("jetson-orin") == "jetson"
    assert devices.capabilities("jetson").torch_device == "cuda"
    assert devices.capabilities("cpu").locks_clocks is False
    with pytest.raises(devices.DeviceError, match="unknown device type 'jetson-xavier'"):
        devices.backend_for_device_type("jetson-xavier")

"""The keys of Flower's two configuration surfaces: a SuperNode's node config and the app's run
config (``[tool.flwr.app.config]`` + ``flwr run -c``), declared as the fleet file's keys are
(``fleet.config.schema.Key``) so one reader checks them and one page documents them
(``docs/fleet-file.md``). Kept apart from the fleet file's keys: these are read by the Flower
apps (``clients/``, ``strategies/``), not by the fleet loader.
"""

from __future__ import annotations

from collections.abc import Mapping

from fleet.config.fields import MAX_DEVICES
from fleet.config.schema import LEARNING, Key, check_keys, check_value, in_range, positive

# A SuperNode's --node-config (deployment; Flower's simulation gives partition-id and
# num-partitions). A hardware node also takes each backend option under its public name.
NODE_KEYS: tuple[Key, ...] = (
    Key("partition-id", int, None, "simulation: which device of the fleet file this node is"),
    Key("num-partitions", int, None, "simulation: how many nodes Flower started"),
    Key("device-name", str, None, "deployment: the device's name"),
    Key("device-type", str, None, "deployment: the device type"),
    Key("budget-w", str, None, 'deployment: watts, or "none"'),
    Key("budget-schedule", str, None, 'deployment: "0:7,600:4.5"'),
    Key("profile", str, None, "deployment: the profile CSV on this node"),
    Key("data", str, None, "deployment: the trace CSV or dataset on this node"),
    Key("learning", str, "trace", "trace or train", choices=LEARNING),
    Key("client", str, "simulated", '"hardware": drive a board through the agent'),
    Key("pace", float, 0.0, "device seconds per wall second (0: no wait)"),
    Key("work-dir", str, None, "the node's own folder (checkpoints, the agent's files)"),
    Key("backend", str, "jetson", "hardware: the agent's backend"),
    Key("agent-python", str, None, "hardware: the interpreter that runs the agent"),
    Key("agent-timeout-s", float, 3600.0, "hardware: the agent's longest call (seconds)"),
    Key("budget-file", str, None, "hardware: a live budget file on the board"),
    Key("pace-to-profile", bool, False, "hardware rehearsal: steps last the profile's time"),
)
HARDWARE_NODE_KEYS = ("backend", "agent-python", "agent-timeout-s", "work-dir", "budget-file",
                      "pace-to-profile")  # fmt: skip

# [tool.flwr.app.config] (and flwr run -c): the ServerApp's settings (strategies/server_app.py).
RUN_CONFIG_KEYS: tuple[Key, ...] = (
    Key("fleet-path", str, "simulations/fleets/default.toml", "the fleet TOML"),
    Key("run-dir", str, "", "empty: runs/<run name>-<UTC time>"),
    Key(
        "num-nodes",
        int,
        0,
        "devices to wait for; 0 = every device in the fleet file (the others: lost, never run)",
        expect=f"an integer in [0, {MAX_DEVICES}] (0: every device)",
        ok=in_range(0, MAX_DEVICES),
    ),
    Key(
        "ship-weights",
        str,
        "fleet",
        '"fleet" = the fleet\'s [run] ship_weights, or true/false',
        choices=("fleet", "true", "false"),
    ),
    Key(
        "round-timeout-s",
        float,
        600.0,
        "one-request rounds: the wait for replies; segments: the first allowance",
        expect="a finite number > 0 (seconds)",
        ok=positive,
    ),
    Key(
        "segment-s",
        float,
        600.0,
        "device-clock seconds per segment (0: one request per device and round)",
        expect="0 or seconds in [0.001, 2592000]",
        ok=lambda v: v == 0 or 1e-3 <= float(v) <= 86400 * 30,  # type: ignore[arg-type]
    ),
    Key(
        "node-wait-s",
        float,
        300.0,
        "how long the first round waits for devices to connect",
        expect="a finite number > 0 (seconds)",
        ok=positive,
    ),
    Key(
        "engine",
        str,
        "flower",
        "the report's engine name (deployment: flower-deployment)",
        choices=("flower", "flower-deployment"),
    ),
    Key("run-token", str, "", "echoed into report.json so a launcher knows the report is its own"),
    Key("progress-file", str, "", "a launcher in another process follows progress there"),
)


def node_config_keys() -> list[str]:
    """Every key a node config may hold: the declared ones, then each backend option's public
    name (generated from the backend registry, fleet.agent.devices)."""
    from fleet.agent.devices import all_options

    return [*(k.name for k in NODE_KEYS), *(opt.public for opt, _ in all_options())]


def check_node_config(nc: Mapping) -> None:
    """A node config (``--node-config``, or Flower's simulation) with a key no reader knows is
    refused in one line naming the key and the closest known one."""
    known = node_config_keys()
    check_keys(nc, known, lambda key: "node config")


def check_run_config(run_config: Mapping) -> None:
    """The app's run config (``[tool.flwr.app.config]`` + ``flwr run -c``): unknown keys refused,
    and every value as its key declares it (``num-nodes=-3`` waited for -3 devices and lost
    them all; ``2.7`` became 2, ``true`` 1, a NaN timeout never ended). An empty text is a
    key left unset (``strategies/server_app.py`` reads it as the default); ``ship-weights``
    takes TOML's true/false too."""
    where = "run config ([tool.flwr.app.config] or flwr run -c)"
    check_keys(run_config, (k.name for k in RUN_CONFIG_KEYS), lambda key: where)
    for key in RUN_CONFIG_KEYS:
        value = run_config.get(key.name)
        if value is None or value == "":  # a text left empty is unset (its default)
            continue
        if key.name == "ship-weights" and isinstance(value, bool):
            continue
        if key.name == "ship-weights" and isinstance(value, str):
            value = value.strip().lower()
        check_value(key, value, where)

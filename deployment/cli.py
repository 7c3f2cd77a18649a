"""`powerfleet coordinator` and `powerfleet device`: a fleet file deployed on real machines.

Plugins for ``fleet/cli``: ``register_coordinator(sub)`` and ``register_device(sub)`` add their
parser and set ``func(args) -> exit code``, like ``fleet/cli/cmd_*.py``. The work is in
``deployment/deploy.py`` (the coordinator), ``daemons.py`` and ``processes.py``.

    powerfleet coordinator --fleet F --host H --ssl-ca-certfile CA --ssl-certfile CRT \
        --ssl-keyfile KEY --auth-public-keys keys/          # production: TLS + SuperNode auth
    powerfleet device --fleet F --name N --superlink H:9091 --root-certificates CA \
        --auth-private-key N.key
    powerfleet coordinator --fleet F --insecure    # plaintext: loopback only, explicitly
    powerfleet device --fleet F --name N --insecure

The SuperLink of Flower 1.41 serves devices, the `flwr` CLI and the ServerApp on one port, so a
device's ``--superlink`` is the coordinator's ``--host:--port``. TLS is the default; plaintext
needs ``--insecure`` and an address that resolves to loopback only (deployment/security.py).
Each run's Flower files live in a fresh 0700 directory under ``--work-dir`` (default
``~/.local/state/powerfleet/...``), removed when the command ends unless ``--keep-work-dir``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from clients.segment_wire import PACE_RANGE
from deployment import daemons, deploy, processes, security, supernode
from fleet.agent.devices import (
    DeviceError,
    add_backend_arguments,
    backend_names,
    given_options,
    options_for,
)
from fleet.cli import checks
from fleet.common.errors import InputError
from fleet.common.names import check_name
from fleet.common.signals import sigterm_as_interrupt
from fleet.config.fleetfile import load_fleet
from fleet.reports import roundstate

DEFAULT_PORT = 9091


def _note(command: str, message: str) -> None:
    print(f"powerfleet {command}: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- coordinator


def register_coordinator(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "coordinator",
        help="run a fleet's rounds on real devices (starts a Flower SuperLink, submits the app)",
        description="Start a SuperLink, submit the powerfleet Flower app with `flwr run`, wait "
        "for the devices (`powerfleet device`) to report, print the round report.",
    )
    p.add_argument("--fleet", required=True, help="fleet TOML")
    p.add_argument("--host", default="127.0.0.1", help="address to serve on (default loopback)")
    p.add_argument(
        "--port", type=checks.tcp_port(), default=DEFAULT_PORT, help="SuperLink port (all APIs)"
    )
    p.add_argument(
        "--run-dir",
        type=checks.output_dir("run directory"),
        help="report directory (default runs/<run name>-<time>)",
    )
    p.add_argument("--nodes", type=int, default=0, help="devices to wait for (0: all in fleet)")
    p.add_argument(
        "--ship-weights",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="send the model weights (default: the fleet's [run] ship_weights)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=3600.0,
        help="give up after this many s without progress (a segment reply, run-dir/state.json)",
    )
    p.add_argument(
        "--segment-s",
        type=float,
        default=None,
        help="device-clock seconds per segment of a round (default 600; 0: one request per "
        "device and round). Rerun with the same --run-dir to resume an interrupted run",
    )
    p.add_argument("--ssl-ca-certfile", help="TLS: CA certificate (PEM)")
    p.add_argument("--ssl-certfile", help="TLS: server certificate (PEM)")
    p.add_argument("--ssl-keyfile", help="TLS: server private key (PEM)")
    p.add_argument(
        "--auth-public-keys",
        nargs="+",
        metavar="PATH",
        help="SuperNode authentication (needs TLS): the authorised devices' OpenSSH ECDSA public "
        "keys, each PATH a KEY.pub file or a directory of *.pub files; only these may join",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        help="plaintext without TLS; only when --host resolves to loopback addresses only",
    )
    _add_work_dir(p, "~/.local/state/powerfleet")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.set_defaults(func=cmd_coordinator)


def _add_work_dir(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument(
        "--work-dir",
        help=f"working directory (yours, not writable by others; default {default}); each run "
        "gets a fresh 0700 directory in it for Flower's files",
    )
    p.add_argument(
        "--keep-work-dir",
        action="store_true",
        help="keep the run's Flower directory when the command ends (default: removed)",
    )


def _tls(args: argparse.Namespace) -> security.Tls | None:
    files = (args.ssl_ca_certfile, args.ssl_certfile, args.ssl_keyfile)
    if not any(files):
        return None
    return security.Tls(*files)


def cmd_coordinator(args: argparse.Namespace) -> int:
    fleet = load_fleet(args.fleet)
    run_dir = Path(args.run_dir or f"runs/{fleet.run.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    n = args.nodes or len(fleet.devices)
    if roundstate.resumable(run_dir, fleet.path) is not None:
        _note("coordinator", f"resuming the unfinished run in {run_dir} (see: powerfleet status)")
    keys = security.public_keys(args.auth_public_keys or [])
    # refuse bad TLS / --insecure / auth settings before anything starts
    daemons.superlink_command(
        args.host, args.port, _tls(args), insecure=args.insecure, supernode_auth=bool(keys)
    )
    public = socket.gethostname() if args.host in ("0.0.0.0", "::") else args.host
    address = f"{public}:{args.port}"
    how = f" --root-certificates {args.ssl_ca_certfile}" if args.ssl_ca_certfile else ""
    how += " --auth-private-key KEY" if keys else ""
    how += " --insecure" if args.insecure else ""
    auth = f"; {len(keys)} SuperNode key(s) authorised" if keys else ""
    _note("coordinator", f"SuperLink on {args.host}:{args.port}{auth}; waiting for {n} device(s):")
    for spec in fleet.devices[:5]:
        _note(
            "coordinator",
            f"  powerfleet device --fleet {args.fleet} --name {spec.name} --superlink {address}"
            + how,
        )
    if len(fleet.devices) > 5:
        _note("coordinator", f"  ... and {len(fleet.devices) - 5} more")
    try:
        with sigterm_as_interrupt():  # SIGTERM, like Ctrl-C: the SuperLink tree is stopped
            result = deploy.run_coordinator(
                args.fleet,
                run_dir,
                link=deploy.LinkSettings(
                    host=args.host,
                    port=args.port,
                    tls=_tls(args),
                    insecure=args.insecure,
                    auth_public_keys=tuple(keys),
                    work_dir=args.work_dir,
                    keep_work_dir=args.keep_work_dir,
                ),
                submission=deploy.Submission(
                    num_nodes=args.nodes,
                    ship_weights=args.ship_weights,
                    segment_s=args.segment_s,
                    timeout_s=args.timeout,
                ),
                on_status=lambda status: _note("coordinator", f"run status: {status}"),
            )
    except processes.DeployError as exc:
        _note("coordinator", f"error: {exc} ({run_dir / 'logs' / 'superlink.log'})")
        return 1
    except KeyboardInterrupt as exc:  # the ServerApp recorded how far the run got
        raise roundstate.stopped(run_dir, exc) from None
    if not result.ok:
        why = result.details or "no report was written"
        _note("coordinator", f"error: run {result.run_id} {result.status}: {why}")
        return 1
    report = result.report or {}
    if args.json:
        print(json.dumps(report))
    else:
        print_report(report)
        _note("coordinator", f"report: {run_dir / 'report.json'}")
    return 0


def _fmt(value: Any, spec: str = ".1f") -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, (int, float)):
        return format(value, spec)
    return str(value)


def print_report(report: dict[str, Any]) -> None:
    """The round's rows and fleet totals as a table for people."""
    from rich.console import Console
    from rich.table import Table

    console = Console() if sys.stdout.isatty() else Console(width=200)
    table = Table(title=f"{report.get('run', '')}: round {report.get('round', '')}")
    for col in ("device", "type", "budget W", "status", "batch", "MHz", "time s", "energy J",
                "peak W", "x B1"):  # fmt: skip
        table.add_column(col, justify="left" if col in ("device", "type", "status") else "right")
    for r in report.get("devices", []):
        table.add_row(
            str(r.get("device")),
            str(r.get("device_type") or "-"),
            "none" if r.get("budget_w") is None else _fmt(r.get("budget_w"), "g"),
            str(r.get("status")),
            _fmt(r.get("batch_size"), "d"),
            _fmt(r.get("freq_mhz"), "g"),
            _fmt(r.get("time_s")),
            _fmt(r.get("energy_j"), ".0f"),
            _fmt(r.get("peak_power_w"), ".2f"),
            _fmt(r.get("speedup_vs_b1"), ".2f"),
        )
    console.print(table)
    f = report.get("fleet", {})
    console.print(
        f"fleet: {f.get('trained')}/{f.get('devices')} trained, "
        f"energy {_fmt(f.get('energy_j'), '.0f')} J, "
        f"round {_fmt(f.get('round_time_s'))} s (median {_fmt(f.get('median_time_s'))} s), "
        f"budget violations: {len(f.get('budget_violations') or [])}"
    )


# --------------------------------------------------------------------------- device


def register_device(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "device",
        help="run one fleet device as a Flower SuperNode (replayed or real hardware)",
        description="Start a SuperNode for the fleet entry --name, with its budget, profile and "
        "data as node config; runs until Ctrl-C.",
    )
    p.add_argument("--fleet", required=True, help="fleet TOML")
    p.add_argument("--name", required=True, help="the device's name in the fleet file")
    p.add_argument(
        "--superlink",
        default=f"127.0.0.1:{DEFAULT_PORT}",
        help="the coordinator's HOST:PORT",
    )
    p.add_argument(
        "--port",
        type=checks.tcp_port(free_ok=True),
        default=0,
        help="local Runtime API port (0: a free one)",
    )
    p.add_argument(
        "--client",
        choices=("replay", "hardware"),
        default="replay",
        help="replay: answer from the fleet file's profiles; hardware: run the agent here",
    )
    p.add_argument("--root-certificates", help="TLS: the SuperLink's CA certificate (PEM)")
    p.add_argument(
        "--auth-private-key",
        help="SuperNode authentication (needs TLS): this device's OpenSSH ECDSA private key; "
        "its KEY.pub must be among the coordinator's --auth-public-keys",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        help="plaintext without TLS; only when --superlink resolves to loopback addresses only",
    )
    _add_work_dir(p, "~/.local/state/powerfleet/device-NAME")
    p.add_argument(
        "--pace",
        type=float,
        help="replay client: device seconds per wall second (e.g. 60: a 2-hour round in 2 "
        "minutes; default: no wait, the virtual clock answers at once)",
    )
    hw = p.add_argument_group("hardware client (--client hardware)")
    hw.add_argument("--backend", choices=backend_names(), help="agent backend (default jetson)")
    hw.add_argument("--agent-python", help="interpreter for the agent (e.g. JetPack's python3)")
    hw.add_argument("--agent-timeout-s", type=float, help="agent: limit for profile/train")
    hw.add_argument(
        "--budget-file",
        help="a live budget file on the board (watts; re-read every second) instead of the "
        "fleet's budget",
    )
    # Each backend's own options, from its declaration (fleet/agent/devices): they travel as
    # node-config keys of the same names to the hardware client, which passes them to the agent.
    add_backend_arguments(hw, with_backend=False)
    p.set_defaults(func=cmd_device)


def cmd_device(args: argparse.Namespace) -> int:
    check_name("--name", "device name", args.name)  # the alphabet every surface shares
    fleet = load_fleet(args.fleet)
    by_name = {d.name: d for d in fleet.devices}
    spec = by_name.get(args.name)
    if spec is None:
        names = ", ".join(list(by_name)[:10]) + (" ..." if len(by_name) > 10 else "")
        raise InputError(f"{args.fleet}: no device named {args.name!r} (devices: {names})")
    config: dict[str, object] = dict(spec.to_node_config())  # plus the client's keys below
    if spec.learning != "trace":
        config["learning"] = spec.learning
    agent_options = given_options(args)
    if args.client == "hardware":
        try:  # refuse a flag the chosen backend does not take before anything starts
            options_for(args.backend or "jetson", agent_options)
        except DeviceError as exc:
            raise InputError(str(exc)) from None
    elif args.backend or agent_options or args.budget_file:
        raise InputError(
            "--backend, --budget-file and the agent's options apply to --client hardware"
        )
    if args.pace is not None:  # the node's own check, said before its SuperNode starts
        if args.client != "replay":
            raise InputError("--pace applies to --client replay (a board runs at its own pace)")
        lo, hi = PACE_RANGE
        if not (args.pace == 0 or lo <= args.pace <= hi):
            raise InputError(
                f"--pace: expected 0 (no wait) or device seconds per wall second in "
                f"[{lo:g}, {hi:g}], got {args.pace}"
            )
    # this device's own directory: measured profiles and weight files (hardware client), logs,
    # and one fresh 0700 Flower directory per run
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", spec.name)
    work = security.owned_dir(args.work_dir or security.state_base() / f"device-{safe}")
    config = daemons.device_node_config(
        config,
        args.client,
        backend=args.backend,
        agent_python=args.agent_python,
        agent_timeout_s=args.agent_timeout_s,
        budget_file=str(Path(args.budget_file).resolve()) if args.budget_file else None,
        work_dir=str(work),  # the agent's, and a replay device's segment checkpoints
        pace=args.pace,
        **{public.replace("-", "_"): value for public, value in agent_options.items()},
    )
    port = args.port or processes.free_port()
    argv = daemons.supernode_command(
        args.superlink,
        port,
        config,
        args.root_certificates,
        insecure=args.insecure,
        auth_private_key=args.auth_private_key,
    )
    log_path = security.owned_dir(work / "logs") / f"supernode-{time.strftime('%Y%m%d-%H%M%S')}.log"
    home = security.run_dir(work, "flwr")
    try:
        return _serve(args, spec.name, argv, home, log_path)
    finally:
        if not args.keep_work_dir:
            shutil.rmtree(home, ignore_errors=True)


def _serve(args: argparse.Namespace, name: str, argv: list[str], home: Path, log_path: Path) -> int:
    """Run the SuperNode until it exits or Ctrl-C / SIGTERM; stop its whole process tree.

    A SuperNode whose connection to the SuperLink ended (``supernode.CONNECTION_ENDED``: Flower
    gave up on an error it does not retry) is started again, after a pause that grows while it
    keeps ending within a minute: a node that stayed down would leave its device ``lost``."""

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, stop)
    proc: subprocess.Popen | None = None
    quick = 0  # restarts in a row of a SuperNode that ended within a minute
    try:
        while True:
            started = time.monotonic()
            proc = processes.start_process(argv, home, log_path, die_with_parent=True)
            if quick == 0:  # the first start
                _note(
                    "device",
                    f"{name} ({args.client}) -> {args.superlink}; log {log_path}; Ctrl-C stops",
                )
            code = proc.wait()
            if code != supernode.CONNECTION_ENDED:
                _note("device", f"SuperNode exited with code {code}; see {log_path}")
                return 1 if code else 0
            quick = quick + 1 if time.monotonic() - started < 60.0 else 1
            pause = min(30.0, 2.0 ** (quick - 1))
            _note(
                "device",
                f"the SuperNode's connection to the SuperLink ended; starting it again in "
                f"{pause:.0f} s (see {log_path})",
            )
            time.sleep(pause)
    except KeyboardInterrupt:
        _note("device", "stopping")
        return 0
    finally:
        if proc is not None:
            processes.stop_tree(proc)
        signal.signal(signal.SIGTERM, old)

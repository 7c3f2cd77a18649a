"""Run a fleet file through Flower's simulation the supported way: ``flwr run`` on a local
simulation SuperLink, exactly as ``flwr run .`` from the project root does.

Why this shape: Flower marks ``flwr.simulation.run_simulation`` deprecated; the supported path is a
SuperLink in simulation mode that ``flwr run`` starts on demand for a connection whose address is
``:local:``. So each call gets a private ``FLWR_HOME`` holding one such connection, sizes the
simulation with ``--federation-config`` (``num-supernodes`` = the fleet's device count), submits the
powerfleet Flower app (``deployment/flower_app``: the same components and run-config keys as the
root ``pyproject.toml``'s ``[tool.flwr.app]``) with this run's settings as run-config overrides, and
waits. ``flwr run --stream`` can exit 0 on a failed run, so success is the report the ServerApp
writes with this call's token. The local SuperLink outlives ``flwr run`` by design; it is found by
this call's private home in its command line and stopped with everything it started.

Ports: the local SuperLink's HTTP and Control API ports are Flower's fixed defaults unless
``FLWR_LOCAL_SUPERLINK_HTTP_API_PORT`` / ``FLWR_LOCAL_CONTROL_API_PORT`` say otherwise; each call
picks free ones, so two runs (or another user's ``flwr run``) never share a SuperLink.

Progress: ``progress(done, total, what)`` (the runner's convention): ``(0, total, "starting")``,
then once per device reply with the device's name, then ``(total, total, "done")``; the ServerApp
runs in another process and appends these to a progress file this call follows.

Resources: one Ray CPU per virtual device and at most ``ray_cpus`` (2: this project's machines
have 2 cores) for Ray.

An existing Ray cluster (``RayPlacement``: ``[run] ray_address`` or ``powerfleet simulate
--ray-address``): the devices run wherever that cluster has room, each holding
``device_cpus`` CPUs and ``device_gpus`` of a GPU (Flower's ``client-resources``). Flower 1.42's
``flwr run`` path carries only ``num-cpus``/``num-gpus``/logging into ``ray.init`` (its
``SimulationConfig``; ``run_simulation``'s ``backend_config["init_args"]["address"]`` has no
``flwr run`` spelling), and ``ray.init()`` without an address reads ``RAY_ADDRESS``: so the
address reaches Ray as ``RAY_ADDRESS`` in the environment of the SuperLink this call starts (its
simulation process inherits it), and ``init-args.num-cpus`` is left out (Ray refuses it when
joining a cluster). Without an address the environment says ``RAY_ADDRESS=local``: a private
instance, even when someone on this machine ran ``ray start`` (``ray.init()`` would otherwise
join the cluster ``/tmp/ray/ray_current_cluster`` names). Every node needs this environment
(the same Python packages) and the fleet's files at the same paths; the report says where each
device ran (``ran_on``).
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deployment import daemons, flwr_cli, processes
from fleet.common.errors import InputError
from fleet.config.fleetfile import RunSettings, load_fleet
from fleet.method import liveness
from fleet.reports import roundstate
from fleet.reports.report import read_report

ANSI = re.compile(r"\x1b\[[0-9;]*m")  # Flower colours its log lines whatever the output is
CONNECTION = "powerfleet-sim"  # the local-simulation connection in the private config.toml


HOME_PREFIX = "powerfleet-flwr-"  # each simulation's private Flower home, in the temp folder
OWNER = "owner.json"  # who made a home (fleet/method/liveness.py): pid, boot id, start time


def sweep_homes() -> list[Path]:
    """Remove the private Flower homes whose maker no longer runs (a ``simulate`` SIGKILLed
    leaves its home behind: its SuperLink's database, the app copy, Ray's session; nothing is
    left alive to remove it). A home without an owner record, or whose owner runs, is left
    alone. Returns the homes removed."""
    gone = []
    for home in Path(tempfile.gettempdir()).glob(HOME_PREFIX + "*"):
        try:
            record = json.loads((home / OWNER).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and liveness.holder(record) == liveness.GONE:
            stop_pids(local_superlinks(home))  # an orphan still shutting down in it, if any
            shutil.rmtree(home, ignore_errors=True)
            if not home.exists():
                gone.append(home)
    return gone


class FlowerRunError(RuntimeError):
    """The Flower run ended without producing this run's report."""


def connection_config() -> str:
    """$FLWR_HOME/config.toml with one local-simulation connection (no ``options.``: Flower
    1.42 deprecates them; the simulation's size travels as ``--federation-config``)."""
    return "\n".join(
        ["[superlink]", f'default = "{CONNECTION}"', "", f"[superlink.{CONNECTION}]"]
        + ['address = ":local:"', ""]
    )


@dataclass(frozen=True)
class RayPlacement:
    """Where Flower's simulation runs the devices: ``address`` None is a private Ray instance
    of ``ray_cpus`` CPUs on this machine, else a running cluster (``host:port`` of its head, or
    ``auto``); each device holds ``device_cpus`` CPUs and ``device_gpus`` of a GPU there."""

    address: str | None = None
    device_cpus: int = 1
    device_gpus: float = 0.0
    ray_cpus: int = 2

    def environment(self) -> dict[str, str]:
        """What the simulation's ``ray.init()`` must read: the cluster, or ``local``."""
        return {"RAY_ADDRESS": self.address or "local"}


def placement_for(
    run: RunSettings,
    address: str | None = None,
    device_cpus: int | None = None,
    device_gpus: float | None = None,
    ray_cpus: int = 2,
) -> RayPlacement:
    """The placement the caller's overrides and the fleet's ``[run]`` (``ray_address``,
    ``ray_device_cpus``, ``ray_device_gpus``) ask for, the caller's first."""
    cpus = device_cpus if device_cpus is not None else run.ray_device_cpus
    gpus = device_gpus if device_gpus is not None else run.ray_device_gpus
    return RayPlacement(
        address=address or run.ray_address or None,
        device_cpus=1 if cpus is None else int(cpus),
        device_gpus=0.0 if gpus is None else float(gpus),
        ray_cpus=ray_cpus,
    )


def federation_config(
    num_supernodes: int,
    ray_cpus: int = 2,
    verbose: bool = False,
    placement: RayPlacement | None = None,
) -> str:
    """The ``--federation-config`` TOML file: one SuperNode per device, each holding the
    placement's CPUs and GPU share; a private Ray instance sized to ``ray_cpus`` (a cluster has
    its own size: Ray refuses one when joining), and Ray's own logging kept out of the output."""
    place = placement or RayPlacement(ray_cpus=ray_cpus)
    lines = [
        f"num-supernodes = {int(num_supernodes)}",
        f"verbose = {'true' if verbose else 'false'}",
        'backend = "ray"',
        f"client-resources-num-cpus = {int(place.device_cpus)}",
        f"client-resources-num-gpus = {float(place.device_gpus)!r}",
    ]
    if place.address is None:
        lines += [f"init-args-num-cpus = {int(place.ray_cpus)}", "init-args-num-gpus = 0"]
    lines += ['init-args-logging-level = "ERROR"', "init-args-log-to-driver = false", ""]
    return "\n".join(lines)


def check_cluster(address: str, timeout_s: float = 5.0) -> None:
    """One line, before anything starts, when nothing answers at the cluster's address
    (``ray.init`` would otherwise fail inside Flower's simulation process, seen only as a run
    without a report)."""
    if address == "auto":
        return
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return
    except (OSError, ValueError) as exc:
        raise InputError(
            f"ray address {address}: no Ray cluster answers there ({exc}); start one with "
            "`ray start --head --port=PORT` or give the head's host:port"
        ) from None


def local_superlinks(flwr_home: Path) -> list[int]:
    """PIDs of the local SuperLink(s) that ``flwr run`` started for this private home."""
    marker = str(flwr_home / "local-superlink")
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [w.decode("utf-8", "replace") for w in cmdline]
        if any(w.endswith("flower-superlink") for w in words[:2]) and any(
            marker in w for w in words
        ):
            pids.append(int(entry.name))
    return pids


def stop_pids(pids: list[int], timeout_s: float = 10.0) -> None:
    """SIGTERM these processes and all they started, SIGKILL what is left after ``timeout_s``."""
    everything = []
    for pid in pids:
        everything += [pid, *processes.descendants(pid)]
    processes.signal_all(everything, timeout_s)


def _follow(path: Path, seen: int, progress: Callable[[int, int, str], None] | None) -> int:
    """Pass progress lines written since ``seen`` to the callback; returns the new count."""
    if progress is None or not path.exists():
        return seen
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    complete = lines if text.endswith("\n") else lines[:-1]  # a line being written waits
    for line in complete[seen:]:
        try:
            done, total, what = json.loads(line)
        except ValueError:
            continue
        progress(int(done), int(total), str(what))
    return len(complete)


def flwr_run_local(
    app_dir: str | Path,
    num_supernodes: int,
    run_config: dict[str, object],
    *,
    ray_cpus: int = 2,
    timeout_s: float = 3600.0,
    verbose: bool = False,
    on_poll: Callable[[], None] | None = None,
    placement: RayPlacement | None = None,
) -> str:
    """``flwr run APP`` on a fresh local simulation SuperLink of ``num_supernodes`` nodes
    (``placement``: on a Ray cluster, see the module's docstring).

    Blocks until the run ends (or ``timeout_s``), calling ``on_poll`` about five times a second
    meanwhile; stops the SuperLink and everything it started; returns the tail of flwr's output
    (empty when ``verbose`` streams it to this process's terminal).
    """
    place = placement or RayPlacement(ray_cpus=ray_cpus)
    if place.address is not None:
        check_cluster(place.address)
    sweep_homes()
    home = Path(tempfile.mkdtemp(prefix=HOME_PREFIX))
    (home / OWNER).write_text(json.dumps(liveness.process_identity()))
    link = None
    try:
        (home / "config.toml").write_text(connection_config())
        federation = home / "federation-config.toml"
        federation.write_text(federation_config(num_supernodes, ray_cpus, verbose, place))
        overrides = home / "run-config.toml"
        lines = [f"{k} = {daemons.toml_value(v)}\n" for k, v in run_config.items()]
        overrides.write_text("".join(lines))
        http_port, control_port = processes.free_port(), processes.free_port()
        env = processes.flower_env(home)
        env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"] = str(http_port)
        env["FLWR_LOCAL_CONTROL_API_PORT"] = str(control_port)
        # The SuperLink `flwr run` would start for a ":local:" connection, started here with the
        # same command: flwr gives it 15 s to answer, too little on a loaded 2-core machine, and
        # owning the process makes stopping it exact. `flwr run` finds it up and uses it.
        link = processes.start_process(
            local_superlink_command(home, http_port, control_port),
            home,
            home / "local-superlink" / "superlink.log",
            place.environment(),
            die_with_parent=True,  # a killed `powerfleet simulate` leaves no run going on
        )
        try:
            processes.wait_healthy("127.0.0.1", http_port, link, timeout_s=120.0)
        except processes.DeployError as exc:
            raise FlowerRunError(f"local simulation SuperLink: {exc}") from None
        argv = [processes.flower_bin("flwr"), "run", str(app_dir), CONNECTION, "--stream"]
        argv += ["--federation-config", str(federation)]
        if run_config:
            argv += ["-c", str(overrides)]
        log_path = home / "flwr-run.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=None if verbose else log,
                stderr=None if verbose else subprocess.STDOUT,
                env=env,
                cwd=str(home),
                start_new_session=True,
                # SIGTERM when `powerfleet simulate` dies, SIGKILL included: left running, its
                # log stream held the SuperLink's shutdown open for about a minute
                preexec_fn=processes.death_signal(),
            )
            deadline = time.monotonic() + timeout_s
            try:
                while proc.poll() is None and time.monotonic() < deadline:
                    if on_poll is not None:
                        on_poll()
                    time.sleep(0.2)
            finally:
                if proc.poll() is None:
                    processes.stop_tree(proc)
        return _last_words(log_path.read_text(errors="replace"))
    finally:
        processes.stop_tree(link)
        stop_pids(local_superlinks(home))
        shutil.rmtree(home, ignore_errors=True)


def local_superlink_command(home: Path, http_port: int, control_port: int) -> list[str]:
    """flwr's own command for a local simulation SuperLink (flwr.cli.local_superlink)."""
    return [
        processes.flower_bin("flower-superlink"),
        "--insecure",
        "--simulation",
        "--isolation",
        "subprocess",
        "--control-api-address",
        f"127.0.0.1:{control_port}",
        "--host",
        "127.0.0.1",
        "--port",
        str(http_port),
        "--database",
        str(home / "local-superlink" / "state.db"),
        "--disable-runtime-dependency-installation",
    ]


def _last_words(text: str) -> str:
    """The last message flwr printed, without rich's box drawing or Flower's colour codes
    (what a user would read)."""
    words = []
    for line in reversed(ANSI.sub("", text).splitlines()):
        clean = line.strip().strip("│╭╮╰╯─ ").strip()
        if clean:
            words.append(clean)
        if len(words) == 3:
            break
    return " ".join(reversed(words))[:400]


def run_flower(
    fleet_path: str | Path,
    run_dir: str | Path,
    progress: Callable[[int, int, str], None] | None = None,
    *,
    ray_cpus: int = 2,
    round_timeout_s: float = 600.0,
    timeout_s: float = 3600.0,
    verbose: bool = False,
    app_dir: str | Path = flwr_cli.APP_DIR,
    segment_s: float | None = None,
    ray_address: str | None = None,
    device_cpus: int | None = None,
    device_gpus: float | None = None,
) -> dict[str, Any]:
    """Simulate the fleet with Flower (one virtual SuperNode per device); return report.json.

    ``segment_s``: device-clock seconds per segment (None: the app's default; 0: one request
    per device and round), run config ``segment-s`` (docs/architecture.md, segmented rounds).
    ``ray_address``, ``device_cpus``, ``device_gpus``: a running Ray cluster and what each
    device holds there (None: the fleet's ``[run]`` ``ray_*`` keys, else a private instance)."""
    fleet_path = Path(fleet_path).resolve()
    run_dir = Path(run_dir).resolve()
    fleet = load_fleet(fleet_path)  # fail fast, with the fleet file's own one-line errors
    placement = placement_for(fleet.run, ray_address, device_cpus, device_gpus, ray_cpus)
    token = uuid.uuid4().hex
    with tempfile.TemporaryDirectory(prefix="powerfleet-progress-") as tmp:
        progress_file = Path(tmp) / "progress.jsonl"
        settings: dict[str, object] = {
            "fleet-path": str(fleet_path),
            "run-dir": str(run_dir),
            "num-nodes": len(fleet.devices),
            "round-timeout-s": float(round_timeout_s),
            "engine": "flower",
            "run-token": token,
            "progress-file": str(progress_file),
        }
        if segment_s is not None:
            settings["segment-s"] = float(segment_s)
        seen = [0]

        def poll() -> None:
            seen[0] = _follow(progress_file, seen[0], progress)

        try:
            said = flwr_run_local(
                app_dir,
                len(fleet.devices),
                settings,
                ray_cpus=ray_cpus,
                timeout_s=timeout_s,
                verbose=verbose,
                on_poll=poll,
                placement=placement,
            )
        except KeyboardInterrupt as exc:  # everything it started is stopped by now
            raise roundstate.stopped(run_dir, exc) from None
        poll()
    return read_run_report(run_dir, token, said)


def read_run_report(run_dir: Path, token: str, said: str = "") -> dict[str, Any]:
    """This run's report.json, or a clear error saying the run did not produce it."""
    hint = f" (flwr run said: {said})" if said else ""
    try:
        return read_report(run_dir, token)
    except InputError as exc:
        raise FlowerRunError(f"the Flower run did not produce its report: {exc}{hint}") from None


__all__ = [
    "FlowerRunError",
    "RayPlacement",
    "check_cluster",
    "connection_config",
    "federation_config",
    "flwr_run_local",
    "local_superlinks",
    "placement_for",
    "run_flower",
    "stop_pids",
]

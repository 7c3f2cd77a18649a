"""Run a fleet file through Flower's Simulation Runtime (Ray backend), in this process.

Why this shape: ``flwr.simulation.run_simulation`` gives both apps an empty run_config and
returns nothing, but runs the ServerApp in a thread of this process. So the settings go in by
closure (``make_server_app(settings)``), the replay ClientApp needs none (its device comes from
``partition-id`` and the fleet path travels in the instruction), and the result comes back as the
report the ServerApp writes, checked against a per-call token so a stale report.json from an
earlier run in the same directory can never be mistaken for this one.

Progress: ``progress(done, total, what)`` (the runner's convention) is called from the ServerApp
thread: ``(0, total, "starting")``, then once per device reply as it arrives with the device's
name, then ``(total, total, "done")``; total = devices x rounds.

Resources: one Ray CPU per virtual device and at most 2 CPUs for Ray (this project's machines
have 2 cores); ``ray_cpus`` raises the cap on bigger hosts.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from fleet.fleetconfig import load_fleet

QUIET_ENV = {
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_DEDUP_LOGS": "0",
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
}


class FlowerRunError(RuntimeError):
    """The Flower run ended without producing this run's report."""


@contextlib.contextmanager
def flower_environment(flwr_home: str | None = None) -> Iterator[str]:
    """Offline, quiet Flower/Ray settings and a private FLWR_HOME, restored afterwards."""
    home = flwr_home or tempfile.mkdtemp(prefix="powerfleet-flwr-")
    wanted = {**QUIET_ENV, "FLWR_HOME": home}
    saved = {k: os.environ.get(k) for k in wanted}
    os.environ.update(wanted)
    try:
        yield home
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if flwr_home is None:
            shutil.rmtree(home, ignore_errors=True)


@contextlib.contextmanager
def _quiet_logging() -> Iterator[None]:
    """flwr logs INFO per round and a deprecation warning for run_simulation: keep errors only."""
    logger = logging.getLogger("flwr")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def backend_config(ray_cpus: int = 2) -> dict[str, Any]:
    return {
        "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
        "init_args": {
            "num_cpus": ray_cpus,
            "num_gpus": 0,
            "logging_level": "ERROR",
            "log_to_driver": False,
            "object_store_memory": 256 * 1024 * 1024,
        },
    }


def run_flower(
    fleet_path: str | Path,
    run_dir: str | Path,
    progress: Callable[[int, int, str], None] | None = None,
    *,
    ray_cpus: int = 2,
    round_timeout_s: float = 600.0,
    verbose: bool = False,
) -> dict[str, Any]:
    """Simulate the fleet with Flower (one virtual SuperNode per device); return report.json."""
    fleet_path = Path(fleet_path).resolve()
    run_dir = Path(run_dir).resolve()
    fleet = load_fleet(fleet_path)  # fail fast, with the fleet file's own one-line errors
    token = uuid.uuid4().hex

    with flower_environment():
        from flwr.simulation import run_simulation

        from clients.client_app import app as client_app
        from strategies.server_app import ServerSettings, make_server_app

        settings = ServerSettings(
            fleet_path=str(fleet_path),
            run_dir=str(run_dir),
            num_nodes=len(fleet.devices),
            round_timeout_s=round_timeout_s,
            engine="flower",  # the runner's engine name (simulations/runner.py ENGINES)
            run_token=token,
            progress=progress,
        )
        with contextlib.nullcontext() if verbose else _quiet_logging():
            run_simulation(
                server_app=make_server_app(settings),
                client_app=client_app,
                num_supernodes=len(fleet.devices),
                backend_name="ray",
                backend_config=backend_config(ray_cpus),  # type: ignore[arg-type]
                verbose_logging=verbose,
            )
    return read_run_report(run_dir, token)


def read_run_report(run_dir: Path, token: str) -> dict[str, Any]:
    """This run's report.json, or a clear error saying the run did not produce it."""
    path = run_dir / "report.json"
    try:
        report = json.loads(path.read_text())
    except FileNotFoundError:
        raise FlowerRunError(
            f"the Flower run wrote no report ({path} is missing); see the errors above"
        ) from None
    except ValueError as exc:
        raise FlowerRunError(f"{path}: not valid JSON: {exc}") from None
    if report.get("run_token") != token:
        raise FlowerRunError(f"{path} is from another run: this run did not finish its report")
    return report

"""TEMPORARY stand-in (replaced by the i20-status branch's module at merge)."""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path

from fleet.common.errors import InputError

STATE_FILE = "state.json"


def fleet_sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def new_state(run, fleet_file, fleet_sha256, engine, run_token, rounds, segment_s, devices):
    now = datetime.now(UTC).isoformat(timespec="seconds")
    return {
        "format": "powerfleet-round-state",
        "version": 1,
        "run": run,
        "fleet_file": fleet_file,
        "fleet_sha256": fleet_sha256,
        "engine": engine,
        "run_token": run_token,
        "started_utc": now,
        "updated_utc": now,
        "finished": False,
        "round": 1,
        "rounds": rounds,
        "segment_s": segment_s,
        "plan": {"deadline_s": None, "revisions": []},
        "devices": {},
        "completed_rounds": [],
    }


def write_state(run_dir, state) -> None:
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    state["updated_utc"] = datetime.now(UTC).isoformat(timespec="seconds")
    tmp = run_dir / ".state.json.tmp"
    tmp.write_text(json.dumps(state, indent=1, default=str))
    os.replace(tmp, run_dir / STATE_FILE)


def read_state(run_dir) -> dict:
    try:
        return json.loads((Path(run_dir) / STATE_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{run_dir}/state.json: {exc}") from None

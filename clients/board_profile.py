"""The profile a hardware node's round starts from, and the board's refreshes of it.

Where the device's profile lives (the node config's ``profile``, else a file in the work
directory), how the round obtains it (the coordinator's store, the board's own file, or first
contact: the agent profiles in predict mode, or with the staircase under the highest budget),
and how a drift-refreshed table from the board is merged back into the file.

Separate from ``hardware_client.py`` because the planning exchange (``hardware_plan``) needs
the profile without a round, and the file handling does not depend on how the round runs.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from clients import records
from clients.agent_link import AgentError, AgentLink, AgentSettings, ProgressCallback
from clients.work_dir import work_dir_for
from fleet.common.errors import InputError
from fleet.config.fleetfile import DeviceSpec
from fleet.core.profile import Profile, load_profile
from fleet.method.profile_io import atomic_write_text, read_rows, write_rows


def profile_path_for(
    spec: DeviceSpec, ins: records.TrainInstruction, settings: AgentSettings
) -> str:
    """Where this device's profile lives (or will be written)."""
    if spec.profile:
        return spec.profile
    return str(work_dir_for(settings) / f"{spec.name}_{ins.run.model or 'model'}.csv")


def obtain_profile(
    link: AgentLink,
    spec: DeviceSpec,
    ins: records.TrainInstruction,
    settings: AgentSettings,
    on_progress: ProgressCallback | None = None,
    info: dict[str, Any] | None = None,
) -> Profile:
    """The profile this round starts from; ``info`` says where it came from (``origin``).

    In order: the coordinator's store shipped it back (``stored``: this board's own, written to
    the profile path, no probe; ``sibling``: a board of the same type's, every row unverified,
    used when this board has no file, so the device round probes its choice before training),
    the profile CSV on this board (``local``), else first contact: the agent profiles in
    predict mode (a small design of probes, the rest predicted; ``profiled``), falling back to
    the staircase under the highest budget it faces (or the full grid) when the grid is too
    small to predict. Batch sizes are the shipped efficiency's.
    """
    info = {} if info is None else info
    path = profile_path_for(spec, ins, settings)
    shipped = ins.profiles.get(spec.name) or {}
    text, origin = shipped.get("csv"), shipped.get("origin")
    if text and (origin == "stored" or not Path(path).is_file()):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, str(text))
        info.update(origin=str(origin or "stored"), probes=0)
        return load_profile(path)
    if Path(path).is_file():
        info.update(origin="local", probes=0)
        return load_profile(path)
    if not ins.run.model:
        raise InputError(f"device {spec.name}: no profile at {path} and no model to profile")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    # the agent writes only inside its work dir: a profile wanted elsewhere is copied out after
    work = work_dir_for(settings)
    inside = Path(path).resolve().parent == work
    out = path if inside else str(work / f"{spec.name}_{ins.run.model}.profile.csv")
    args: dict[str, Any] = {
        "model": ins.run.model,
        "batch_sizes": ins.efficiency.batch_sizes,
        "out": out,
        "rows": False,
    }
    timeout = settings.long_timeout_s
    # predict mode spends a few more probes where the choice at this device's own budgets is
    # in doubt (fleet.agent.prediction.adapt): a tenth of the grid at most (the profiler's default)
    steps = [s.budget_w for s in spec.schedule] or [spec.budget_w]
    adapt = {
        "adapt_budgets": sorted(set(steps), key=lambda b: (b is None, b or 0.0)),
        "adapt_efficiency": {str(b): n for b, n in ins.efficiency.reached.items()},
    }
    try:
        reply = link.request(
            "profile", timeout_s=timeout, on_progress=on_progress, predict=True, **args, **adapt
        )
    except AgentError as exc:
        if "too few" not in str(exc):
            raise
        highest = highest_budget(spec)
        if highest is not None:
            args["budget_w"] = highest
        reply = link.request("profile", timeout_s=timeout, on_progress=on_progress, **args)
    if not inside:
        shutil.copyfile(out, path)
    info.update(origin="profiled", probes=int(reply.get("probes") or 0))
    return load_profile(path)


def highest_budget(spec: DeviceSpec) -> float | None:
    """The highest budget the device will face (None: unlimited): the staircase plan profiles
    the frontier under it, which covers every lower step of a schedule too."""
    steps = [s.budget_w for s in spec.schedule] or [spec.budget_w]
    return None if any(b is None for b in steps) else max(b for b in steps if b is not None)


def merge_refreshed(path: str, refreshed_csv: str) -> None:
    """The board's drift-refreshed table (``fleet.agent.loop.driftwatch``) into this device's
    profile
    file: its rows replace the same (batch size, clock) rows, the rest of the file (batch sizes
    the round did not ship, the header) stays. ``run_on_agent`` then sees the file changed and
    sends it to the coordinator's store."""
    import tempfile

    header, rows, comments = read_rows(path)
    with tempfile.TemporaryDirectory(prefix="powerfleet-refresh-") as tmp:
        new_file = Path(tmp) / "refreshed.csv"
        new_file.write_text(refreshed_csv)
        _h, new_rows, new_comments = read_rows(str(new_file))
    fresh = {(int(r["batch_size"]), float(r["freq_mhz"])): r for _n, r in new_rows}
    merged = [fresh.pop((int(r["batch_size"]), float(r["freq_mhz"])), r) for _n, r in rows]
    merged += list(fresh.values())
    notes = [c for c in new_comments if c not in comments]
    columns = list(header) + [c for c in _h if c not in header]
    write_rows(path, merged, list(comments) + notes, columns)

"""The persisted round state: ``RUN_DIR/state.json``, what a round looks like *now*.

Why a file: a round that lasts hours must be watchable while it runs (``powerfleet status``,
a Prometheus textfile collector reading ``metrics.prom``) and must survive a coordinator
restart, so the coordinator keeps one JSON document per run and rewrites it after every
change. The format is the one in docs/architecture.md ("Round state"); this module is its only
reader and writer:

- ``new_state`` builds the document for a run that starts (every device ``pending``);
- the coordinator mutates the plain dict (statuses, ``Progress.to_dict()``, rows, revisions);
- ``Writer.write`` (``write_state`` for a one-off write) checks it, stamps ``updated_utc``
  and replaces ``state.json`` and ``metrics.prom`` atomically (temp file in the same
  directory, fsync, ``os.replace``), so a reader sees the previous document or the next one,
  never half of one; a ``Writer`` kept across writes renders only the devices that changed;
- ``read_state`` refuses anything that is not such a document (the rules:
  ``fleet.reports.state_check``) with one line naming the file and the field (exit 2 in the
  CLI), never a traceback.

Who writes it, and whether it still does (``fleet.reports.runlife``): every write stamps
``writer`` (pid, boot id, start time, host); a run stopped by SIGINT/SIGTERM records it itself
(``runlife.interrupt``: ``interrupted``, with when and how far it got); a writer killed
outright records nothing, so a reader (``read_run``: ``powerfleet status``, ``powerfleet
report``) that finds ``finished: false`` and a writer that no longer runs sees the run
``interrupted`` as of its last write, and ``seal`` writes that down. A run directory never
claims ``running`` without a live writer.

Plain dicts on purpose: the document is JSON on disk and JSON in ``--json``; a dataclass layer
would only have to be converted both ways.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import os
from pathlib import Path
from typing import Any, NamedTuple

from fleet.common.errors import InputError
from fleet.method import liveness
from fleet.method.profile_io import atomic_write, atomic_write_text
from fleet.reports import runlife, state_check
from fleet.reports.prometheus import device_lines, prometheus_text
from fleet.reports.report import json_safe
from fleet.reports.runlife import now_utc
from fleet.reports.state_check import FORMAT, VERSION, check_state
from fleet.rounds import statuses
from fleet.rounds.device_round import TRAINED
from fleet.rounds.progress import Progress, read_progress

STATE_FILE = "state.json"
METRICS_FILE = "metrics.prom"
MAX_BYTES = 1 << 30  # 100,000 devices fit with room to spare; a bigger file is not ours
FILE_MODE = 0o644  # read by `powerfleet status` and a node_exporter running as another user


def fleet_sha256(path: str | Path) -> str:
    """The fleet file's digest: a restarted coordinator resumes only the fleet it started."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def device_entry(name: str, device_type: str, budget_w: float | None) -> dict[str, Any]:
    """One device before the coordinator has heard from it."""
    return {
        "device": name,
        "device_type": device_type,
        "status": "pending",
        "node_id": None,
        "budget_w": budget_w,
        "progress": _plain(Progress(budget_w=budget_w)),
        "last_seen_utc": None,
        "lost_at_utc": None,
        "message": "",
        "row": None,
    }


def new_state(
    run: str,
    fleet_file: str,
    fleet_sha256: str,
    engine: str,
    run_token: str,
    rounds: int,
    segment_s: float,
    devices: list[tuple[str, str, float | None]],
) -> dict[str, Any]:
    """The state of a run that starts: round 1 of ``rounds``, every device pending.

    ``devices``: (name, device type, budget in watts or None) in fleet order, which is the
    order the table and the metrics keep. ``segment_s`` 0 means unsegmented (each device runs
    its round in one piece, as the direct engine does).
    """
    stamp = now_utc()
    return {
        "format": FORMAT,
        "version": VERSION,
        "run": run,
        "fleet_file": fleet_file,
        "fleet_sha256": fleet_sha256,
        "engine": engine,
        "run_token": run_token,
        "started_utc": stamp,
        "updated_utc": stamp,
        "finished": False,
        "round": 1,
        "rounds": int(rounds),
        "segment_s": float(segment_s),
        "plan": {"deadline_s": None, "revisions": []},
        "devices": {n: device_entry(n, t, b) for n, t, b in devices},
        "completed_rounds": [],
    }


def _plain(p: Progress) -> dict[str, Any]:
    """``Progress.to_dict()``: the kernel's record, as ``state.json`` keeps it."""
    return p.to_dict()


def progress_from_row(row: dict[str, Any]) -> dict[str, Any]:
    """A final report row seen as progress (cumulative, device clock): what the table and the
    metrics show for a device that has finished. A value the row has but Progress's bounds
    refuse is left at its default: the row itself stays in ``row``, untouched."""
    status = row.get("status")
    segs = row.get("segments")
    values = {
        "time_s": row.get("time_s"),
        "samples": row.get("samples"),
        "energy_j": row.get("energy_j"),
        "accuracy": row.get("accuracy"),
        "end_batch_size": row.get("end_batch_size"),
        "end_freq_mhz": row.get("end_freq_mhz"),
        "budget_w": row.get("budget_w"),
        "power_w": row.get("mean_power_w"),
        "done": 1.0 if status in TRAINED else None,
        "eta_s": 0.0 if status in TRAINED else None,
        "segments": len(segs) if isinstance(segs, list) else None,
    }
    values = {k: v for k, v in values.items() if v is not None}
    try:
        return _plain(read_progress(values))  # the usual case: one check of every field
    except InputError:
        pass
    out = Progress()
    for name, value in values.items():  # one field at a time: keep those within bounds
        try:
            setattr(out, name, getattr(read_progress({name: value}), name))
        except InputError:
            pass
    return _plain(out)


def record_row(state: dict[str, Any], row: dict[str, Any], when: str | None = None) -> None:
    """Put a device's final row into the state: its status, message, progress and the row
    (kept as given: ``write_state`` makes non-finite numbers null when it writes)."""
    name = str(row.get("device"))
    entry = state["devices"][name]
    entry["status"] = str(row.get("status"))
    entry["message"] = str(row.get("message") or "")
    entry["progress"] = progress_from_row(row)
    entry["row"] = row
    entry["last_seen_utc"] = when or now_utc()


def write_state(run_dir: str | Path, state: dict[str, Any]) -> None:
    """Check ``state``, stamp it and replace state.json then metrics.prom, every device
    rendered afresh (a one-off write; a process that writes the same run again and again keeps
    a ``Writer``)."""
    Writer(run_dir).write(state)


class _Device(NamedTuple):
    """What a device's entry was last written as: its fingerprint (``marshal`` of the entry:
    every value with its type, so 1, 1.0 and true differ as they do in JSON; None when the
    entry holds something marshal refuses, which is then rendered every write), its
    ``"name": {...}`` item of state.json and its metrics.prom lines."""

    fingerprint: bytes | None
    item: bytes
    lines: tuple[str | None, ...]


class Writer:
    """Writes one run directory's state.json and metrics.prom, again and again, rendering only
    the devices whose entry changed since its last write.

    Why: a coordinator writes the state after every reply (throttled by ``write_gap``); a
    whole rewrite serialises, checks and renders every device, so a reply that arrives alone
    paid a cost that grows with the fleet. Here each device's JSON item and Prometheus lines
    are kept, keyed by its name, and made again (with its check) only when the entry's
    fingerprint differs from the one they were made from: nothing to invalidate by hand, so a
    change anywhere in an entry (in place, nested, by any caller) is seen. The head of the
    document (run, plan, writer, interrupted, ...) is checked and serialised every write.
    The files are assembled from the pieces and replaced atomically as before, byte for byte
    what a full rewrite writes (``json.dumps`` of the document, ``prometheus_text``).
    What stays linear in the fleet: the fingerprints (``marshal``, C, about a tenth of a full
    write's CPU) and the bytes written."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self._run: str | None = None  # the run label the kept lines carry
        self._devices: dict[str, _Device] = {}
        self.rendered = 0  # devices serialised, checked and rendered by the last write
        self.writes = 0

    def write(self, state: dict[str, Any]) -> None:
        """Check ``state``, stamp ``updated_utc`` and the writer, replace state.json then
        metrics.prom atomically.

        Checked with the reader's own rules first, so a document ``read_state`` would refuse
        is never written (a coordinator bug fails here, in its own process, not in a user's
        ``status``). NaN/inf become null, as in every JSON file powerfleet writes. Refused
        (``Superseded``) when another live process has written the file since this one did."""
        path = str(self.run_dir / STATE_FILE)
        runlife.still_writer(path)
        state["updated_utc"] = now_utc()
        state["writer"] = runlife.me()
        c = state_check.Check(path)
        head = _clean_head(state)
        devices = state_check.check_head(c, head)
        run = str(state.get("run", ""))
        if run != self._run:  # every kept line carries the run's label
            self._run, self._devices = run, {}
        kept, fresh = self._devices, {}
        self.rendered = 0
        for name, entry in devices.items():
            try:  # no version 3+: its back-references depend on who else holds a value
                mark: bytes | None = marshal.dumps(entry, 2)
            except ValueError:
                mark = None
            old = kept.get(name)
            if old is None or mark is None or old.fingerprint != mark:
                old = self._render(c, run, name, entry, mark)
            fresh[name] = old
        self._devices = fresh
        # in pieces, the devices joined once: no copy of the whole document made twice
        parts = [b"{"]
        for k, (key, value) in enumerate(state.items()):
            parts.append(f"{', ' if k else ''}{_key(key)}: ".encode())
            if key == "devices":
                parts += [b"{", b", ".join(d.item for d in fresh.values()), b"}"]
            else:
                parts.append(_dumps(value).encode())
        parts.append(b"}\n")
        atomic_write(path, lambda fh: fh.writelines(parts), FILE_MODE)
        runlife.wrote(path)
        metrics = prometheus_text(head, [d.lines for d in fresh.values()])
        atomic_write_text(str(self.run_dir / METRICS_FILE), metrics, FILE_MODE)
        self.writes += 1

    def _render(
        self, c: state_check.Check, run: str, name: str, entry: Any, mark: bytes | None
    ) -> _Device:
        """A device's entry checked, serialised and rendered (NaN/inf null in a copy: the
        caller's dicts stay its own)."""
        try:  # no indent: 3x faster to write, and `status --json` re-serialises anyway
            text = json.dumps(entry, allow_nan=False)
        except ValueError:
            entry = json_safe(entry)
            text = json.dumps(entry, allow_nan=False)
        state_check.check_device(c, name, entry)
        self.rendered += 1
        item = f"{_key(name)}: {text}".encode()  # ASCII: json.dumps escapes the rest
        return _Device(mark, item, device_lines(run, entry))


def _key(key: Any) -> str:
    """An object's key as ``json.dumps`` writes it (a number or true/false as a string)."""
    return json.dumps(key) if isinstance(key, str) else json.dumps({key: 0})[1:-4]


def _dumps(value: Any) -> str:
    """A value as ``json.dumps`` of the whole document writes it (NaN/inf null)."""
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError:
        return json.dumps(json_safe(value), allow_nan=False)


def _clean_head(state: dict[str, Any]) -> dict[str, Any]:
    """The document's head as written (NaN/inf null), its devices object as it is."""
    return {k: v if k == "devices" else json_safe(v) for k, v in state.items()}


def read_state(run_dir: str | Path) -> dict[str, Any]:
    """The state of the run in ``run_dir``, checked field by field (InputError: one line)."""
    run_dir = Path(run_dir)
    path = run_dir / STATE_FILE
    if not run_dir.is_dir():
        raise InputError(f"{run_dir}: no such directory")
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise InputError(f"{path}: {size} bytes is larger than any round state")
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path} not found: is this a powerfleet run directory?") from None
    try:
        state = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f" at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
        raise InputError(f"{path}: not valid JSON ({msg}{where})") from None
    check_state(state, str(path))
    return state


# ---------------------------------------------------------------------------------- summary


def summary(state: dict[str, Any]) -> dict[str, Any]:
    """What a person asks first, computed from the devices: how many in each status, how much
    is done, what the fleet draws against its budgets now, and the longest ETA still open."""
    counts = {s: 0 for s in statuses.ALL}
    samples = energy = power = budget = done = 0.0
    eta: float | None = None
    entries = list(state["devices"].values())
    for e in entries:
        counts[e["status"]] += 1
        pr = e["progress"]
        samples += pr.get("samples") or 0.0
        energy += pr.get("energy_j") or 0.0
        done += pr.get("done") or 0.0
        if e["status"] in statuses.RUNNING:
            power += pr.get("power_w") or 0.0
            b = pr.get("budget_w") if pr.get("budget_w") is not None else e.get("budget_w")
            budget += b or 0.0
            if pr.get("eta_s") is not None:
                eta = max(eta or 0.0, pr["eta_s"])
    running = sum(counts[s] for s in statuses.RUNNING)
    return {
        "run_status": statuses.run_status(state),
        "devices": len(entries),
        "status_counts": {s: n for s, n in counts.items() if n},
        "running": running,
        "final": len(entries) - running,
        "samples": samples,
        "energy_j": energy,
        "running_power_w": power,
        "running_budget_w": budget,
        "done_mean": done / len(entries) if entries else None,
        "eta_max_s": eta,
        "deadline_s": state["plan"]["deadline_s"],
        "plan_revisions": len(state["plan"]["revisions"]),
    }


# ------------------------------------------------------------------------- interruption


def read_run(run_dir: str | Path) -> tuple[dict[str, Any], bool]:
    """(state as it truly is, whether that differs from the file): a run that is not finished
    and whose writer no longer runs is ``interrupted`` as of its last write (the writer was
    killed or crashed before it could say so)."""
    state = read_state(run_dir)
    verdict = runlife.writer_verdict(state)
    if state["finished"] or state.get("interrupted") or verdict != liveness.GONE:
        return state, False
    w = state["writer"]
    runlife.interrupt(
        state,
        f"its writer, pid {w.get('pid')} on {w.get('host') or 'this host'}, is gone: killed or "
        "crashed",
        state["updated_utc"],
    )
    return state, True


def seal(run_dir: str | Path, state: dict[str, Any]) -> bool:
    """Write what ``read_run`` found (a dead writer's run, now ``interrupted``) into state.json
    and metrics.prom, so a dashboard stops showing it running; False when this reader may not
    write there (a copied or read-only run directory): the view stays right either way."""
    try:
        write_state(run_dir, state)
    except (OSError, InputError):
        return False
    return True


def stopped(run_dir: str | Path, exc: BaseException) -> Any:
    """A command that ran a run and was stopped by a signal (the run's writer, a ServerApp in
    another process, was stopped with it): the run's state says ``interrupted`` by that signal
    (the ServerApp may have said so itself; one killed before it could is said so here), and
    the ``Interrupted`` that says in one line how far the run got."""
    from fleet.common.signals import Interrupted, name_of, signum_of

    try:
        state = read_state(run_dir)
    except InputError:  # stopped before the run wrote any state
        return Interrupted(f"before the run started; nothing in {run_dir}", signum_of(exc))
    verdict = runlife.writer_verdict(state)
    if not state["finished"] and not state.get("interrupted") and verdict == liveness.GONE:
        w = state["writer"]
        runlife.interrupt(state, f"{name_of(exc)}; its writer, pid {w.get('pid')}, stopped with it")
        seal(run_dir, state)
    if state.get("interrupted"):
        line = runlife.interruption_line(state)
    else:
        line = f"{name_of(exc)} while {statuses.run_status(state)}"
    return Interrupted(f"{line}; state in {run_dir}", signum_of(exc))


def remove_stale_temps(run_dir: str | Path) -> list[str]:
    """Temp files a killed writer left (``.state.json.tmp-*``): removed by a restarted
    coordinator before it writes again; returns their names."""
    gone = []
    for name in os.listdir(run_dir):
        if name.startswith((f".{STATE_FILE}.tmp-", f".{METRICS_FILE}.tmp-")):
            os.unlink(os.path.join(run_dir, name))
            gone.append(name)
    return gone


def resumable(run_dir: str | Path, fleet_path: str | Path) -> dict[str, Any] | None:
    """The state of an unfinished run of this fleet file in ``run_dir`` (a coordinator started
    again resumes it), or None when ``run_dir`` holds no run. A finished run, or a run of
    another (or an edited) fleet file, is refused in one line: a run directory holds one run."""
    path = Path(run_dir) / STATE_FILE
    if not path.exists():
        return None
    state = read_state(run_dir)
    if state.get("fleet_sha256") != fleet_sha256(fleet_path):
        raise InputError(
            f"{path}: holds a run of another fleet file (or an edited one); use a new run dir"
        )
    if state.get("finished"):
        raise InputError(f"{path}: this run has finished; use a new run directory")
    return state  # running (its writer killed: this one resumes it) or interrupted

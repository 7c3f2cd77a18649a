"""The coordinator's profile store: one profile per (device, workload), with its provenance.

Why: a board with no profile for a (model, input shape) profiles on first contact and returns
the CSV with its reply; the coordinator keeps it here and ships it back next round, so the board
never profiles twice. A new board of a type already in the store can start from a sibling's
profile and verify it with a few probes (``fleet.trust.verify.select_verified``) instead of
profiling from scratch. See docs/architecture.md (profile store).

Layout and codec (one of each)::

    STORE/<device>/<model>@<input_shape>.csv

The file is an ordinary profile CSV (``fleet.method.profile_io``: any tool reads it); the
provenance travels in its ``#`` header as ``store.<key>=<value>`` lines (device, model,
input_shape, board_type, l4t, serial, date, probes, source and any extra keys), above the
profile's own comment lines, which are kept. Names that become path parts (device, model,
input shape) are restricted to letters, digits, ``.``, ``_``, ``-`` (never ``/`` or ``..``).
Writes are atomic (temp file + ``os.replace``): a reader sees the old profile or the new one.
"""

from __future__ import annotations

import datetime
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from fleet.common import names
from fleet.common.errors import InputError
from fleet.config.device_types import sibling_fits
from fleet.core.profile import load_profile
from fleet.method.profile_io import (
    PREDICTED,
    ProfileFormatError,
    atomic_write_text,
    read_rows,
    write_rows,
)

SOURCES = ("measured", "predicted", "refreshed", "sibling", "virtual")
PREFIX = "store."
SUFFIX = ".csv"
DEFAULT_SUBDIR = "profile-store"
# Sibling preference: what was measured on a board beats what was predicted or copied; a
# virtual board's profile (host times, not a board's) comes last.
_RANK = {"measured": 0, "refreshed": 1, "predicted": 2, "sibling": 3, "virtual": 4}

Row = dict[str, Any]


def check_name(kind: str, name: str) -> str:
    """``name`` if it is safe as one path part (``fleet.common.names``, the one validator of names),
    else InputError naming it (one line). Store keys allow 128 characters (a model and shape)."""
    return names.check_name("profile store", kind, name, max_len=128)


@dataclass(frozen=True)
class Workload:
    """What a profile is valid for: the model and the input shape (e.g. ``3x32x32``)."""

    model: str
    input_shape: str

    @classmethod
    def of(cls, model: str, input_shape: Any) -> Workload:
        """From a model name and a shape given as ``3x32x32``, a list or a tuple."""
        if isinstance(input_shape, (list, tuple)):
            input_shape = "x".join(str(int(d)) for d in input_shape)
        return cls(check_name("model", model), check_name("input shape", str(input_shape)))

    @property
    def label(self) -> str:
        return f"{self.model}@{self.input_shape}"


@dataclass
class Provenance:
    """Where a stored profile came from. ``source``: measured, predicted (a predict-mode
    profile: some rows are predictions), refreshed (corrected after drift), sibling (copied
    from another board of the same type, not yet verified here), virtual (measured on a
    virtual board: the host's times, not the board's)."""

    board_type: str
    source: str = "measured"
    date: str = ""
    probes: int | None = None
    l4t: str = ""
    serial: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "board_type": self.board_type,
            "source": self.source,
            "date": self.date,
            "probes": self.probes,
            "l4t": self.l4t,
            "serial": self.serial,
        }
        out.update(self.extra)
        return out


_FIELDS = ("board_type", "source", "date", "probes", "l4t", "serial")


@dataclass
class StoredProfile:
    device: str
    workload: Workload
    path: Path
    provenance: Provenance
    rows: list[Row] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)  # the profile's own header lines

    def summary(self) -> dict[str, Any]:
        """One listing line as plain data (``powerfleet profiles --json``)."""
        return {
            "device": self.device,
            "type": self.provenance.board_type,
            "model": self.workload.model,
            "input_shape": self.workload.input_shape,
            "source": self.provenance.source,
            "probes": self.provenance.probes,
            "date": self.provenance.date,
            "l4t": self.provenance.l4t,
            "serial": self.provenance.serial,
            "rows": len(self.rows),
            "predicted_rows": sum(1 for r in self.rows if r.get("source") == PREDICTED),
            "path": str(self.path),
        }


def _utc_now() -> str:
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    return now.isoformat().replace("+00:00", "Z")


def default_store(state_dir: str | Path) -> Path:
    """Where the store lives when neither ``[run] profile_store`` nor ``--store`` says."""
    return Path(state_dir) / DEFAULT_SUBDIR


def profile_path(store: str | Path, device: str, workload: Workload) -> Path:
    check_name("device", device)
    check_name("model", workload.model)
    check_name("input shape", workload.input_shape)
    return Path(store) / device / f"{workload.model}@{workload.input_shape}{SUFFIX}"


def _one_line(key: str, value: Any) -> str:
    text = "" if value is None else str(value)
    if "\n" in text or "\r" in text:
        raise InputError(f"profile store: provenance {key}={text!r} must be one line")
    return text


def _check_provenance(p: Provenance) -> None:
    if p.source not in SOURCES:
        raise InputError(
            f"profile store: provenance source={p.source!r}; expected one of {', '.join(SOURCES)}"
        )
    if not p.board_type:
        raise InputError("profile store: provenance board_type is empty (e.g. jetson-nano)")
    if p.probes is not None and (not isinstance(p.probes, int) or p.probes < 0):
        raise InputError(f"profile store: provenance probes={p.probes!r}; expected an int >= 0")
    for key in p.extra:
        if not re.match(r"^[a-z][a-z0-9_]*$", key) or key in _FIELDS + ("device", "model"):
            raise InputError(f"profile store: provenance key {key!r} is not allowed")


def _header(device: str, workload: Workload, p: Provenance) -> list[str]:
    values: list[tuple[str, Any]] = [
        ("device", device),
        ("model", workload.model),
        ("input_shape", workload.input_shape),
        ("board_type", p.board_type),
        ("source", p.source),
        ("date", p.date),
        ("probes", "" if p.probes is None else p.probes),
        ("l4t", p.l4t),
        ("serial", p.serial),
    ]
    values += sorted(p.extra.items())
    return [f"{PREFIX}{k}={_one_line(k, v)}" for k, v in values]


def _parse_header(comments: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    meta: dict[str, str] = {}
    own: list[str] = []
    for line in comments:
        if line.startswith(PREFIX) and "=" in line:
            key, value = line[len(PREFIX) :].split("=", 1)
            meta[key.strip()] = value.strip()
        else:
            own.append(line)
    return meta, own


def _read(path: Path) -> tuple[list[str], list[Row], list[str]]:
    """(header, rows, comments) of a profile file, validated (one-line InputError)."""
    load_profile(path)
    try:
        header, numbered, comments = read_rows(str(path))
    except ProfileFormatError as exc:
        raise InputError(str(exc)) from None
    return header, [row for _lineno, row in numbered], comments


def _parse_text(text: str) -> tuple[list[str], list[Row], list[str]]:
    """Validate CSV text with the one profile reader (through a private temp file)."""
    with tempfile.TemporaryDirectory(prefix="powerfleet-store-") as tmp:
        path = Path(tmp) / "incoming.csv"
        atomic_write_text(str(path), text)
        try:
            return _read(path)
        except InputError as exc:
            raise InputError(str(exc).replace(str(path), "profile store: incoming CSV")) from None


def put(
    store: str | Path,
    device: str,
    workload: Workload,
    rows_or_csv_text: str | Sequence[Row],
    provenance: Provenance,
    comments: Sequence[str] = (),
) -> StoredProfile:
    """Store (or replace) the profile of ``device`` for ``workload``; returns what was written.

    ``rows_or_csv_text``: the CSV text a device returned, or profile rows. The profile is
    validated first (one-line InputError naming the problem); a ``model`` column that names
    another model than the workload is refused. ``provenance.date`` defaults to now and
    ``provenance.probes`` to the number of rows not marked ``source=predicted``.
    ``comments``: header lines to keep with rows (CSV text brings its own).
    """
    path = profile_path(store, device, workload)
    _check_provenance(provenance)
    if isinstance(rows_or_csv_text, str):
        header, rows, comments = _parse_text(rows_or_csv_text)
    else:
        with tempfile.TemporaryDirectory(prefix="powerfleet-store-") as tmp:
            tmp_path = Path(tmp) / "rows.csv"
            write_rows(str(tmp_path), [dict(r) for r in rows_or_csv_text], comments)
            try:
                header, rows, comments = _read(tmp_path)
            except InputError as exc:
                msg = str(exc).replace(str(tmp_path), "profile store: rows")
                raise InputError(msg) from None
    models = {str(r["model"]) for r in rows if r.get("model")}
    if models and models != {workload.model}:
        raise InputError(
            f"profile store: the profile's model column says {', '.join(sorted(models))}, "
            f"not {workload.model!r}; refusing to store it under {workload.label}"
        )
    prov = Provenance(**{**provenance.__dict__, "extra": dict(provenance.extra)})
    if not prov.date:
        prov.date = _utc_now()
    if prov.probes is None:
        prov.probes = sum(1 for r in rows if r.get("source") != PREDICTED)
    _meta, own = _parse_header(comments)
    write_rows(str(path), rows, _header(device, workload, prov) + own, columns=header)
    return StoredProfile(device, workload, path, prov, rows, own)


def _load(path: Path) -> StoredProfile:
    header, rows, comments = _read(path)
    meta, own = _parse_header(comments)
    try:
        device, model, shape = meta["device"], meta["model"], meta["input_shape"]
        board = meta["board_type"]
    except KeyError as exc:
        raise InputError(f"{path}: no '# {PREFIX}{exc.args[0]}=' line; not a store file") from None
    probes_raw = meta.get("probes", "")
    try:
        probes = int(probes_raw) if probes_raw else None
    except ValueError:
        raise InputError(f"{path}: {PREFIX}probes={probes_raw!r}, expected an integer") from None
    extra = {k: v for k, v in meta.items() if k not in _FIELDS + ("device", "model", "input_shape")}
    prov = Provenance(
        board_type=board,
        source=meta.get("source", "measured"),
        date=meta.get("date", ""),
        probes=probes,
        l4t=meta.get("l4t", ""),
        serial=meta.get("serial", ""),
        extra=extra,
    )
    return StoredProfile(device, Workload(model, shape), path, prov, rows, own)


def get(store: str | Path, device: str, workload: Workload) -> StoredProfile | None:
    """The stored profile of ``device`` for ``workload``, or None when there is none yet."""
    path = profile_path(store, device, workload)
    if not path.is_file():
        return None
    return _load(path)


def _files(store: str | Path) -> list[Path]:
    root = Path(store)
    if not root.exists():
        return []
    if not root.is_dir():
        raise InputError(f"profile store {root}: not a directory")
    return sorted(
        p
        for p in root.glob(f"*/*{SUFFIX}")
        if p.is_file() and not p.name.startswith(".") and names.is_safe(p.parent.name, 128)
    )


def list_store(store: str | Path) -> list[StoredProfile]:
    """Every profile in the store, by device then workload. A file that does not read as a
    store profile raises InputError naming it (the store is the coordinator's own)."""
    return [_load(p) for p in _files(store)]


def sibling(
    store: str | Path, device_type: str, workload: Workload, exclude: str | None = None
) -> StoredProfile | None:
    """A profile of another device of type ``device_type`` for the same workload, or None.

    Only a profile whose every clock the type's known clock table names (``sibling_fits``: a
    profile never crosses to a board whose clocks it does not name). Preference: measured, then
    refreshed, predicted, sibling copies; then the most probes; then the newest. The caller
    stores it for the new device with ``source="sibling"`` (and e.g. ``extra={"sibling_of":
    device}``) and verifies it with a few probes before trusting it.
    """
    found = [
        s
        for s in list_store(store)
        if s.workload == workload
        and (exclude is None or s.device != exclude)
        and sibling_fits(s.provenance.board_type, _freqs(s.rows), device_type)
    ]
    if not found:
        return None
    found.sort(key=lambda s: s.provenance.date, reverse=True)
    found.sort(key=lambda s: (_RANK.get(s.provenance.source, 9), -(s.provenance.probes or 0)))
    return found[0]


def _freqs(rows: Sequence[Row]) -> list[float]:
    return [float(r["freq_mhz"]) for r in rows if r.get("freq_mhz") not in (None, "")]


def provenance_from_comments(
    comments: Sequence[str], board_type: str, **overrides: Any
) -> Provenance:
    """Provenance from an agent-written profile's ``key=value`` header lines (``date``,
    ``probes``, ``plan``, ``source``, ``l4t``, ``serial`` where the backend reported them).
    A virtual board's (``source=virtual``) stays virtual, whatever its plan; a predict-mode
    profile (``plan=predict``) is ``predicted``; ``source=refreshed`` stays."""
    meta: dict[str, str] = {}
    for line in comments:
        if "=" in line and not line.startswith(PREFIX):
            key, value = line.split("=", 1)
            meta.setdefault(key.strip(), value.strip())
    source = "measured"
    if meta.get("source") in ("virtual", "refreshed", "sibling"):
        source = meta["source"]
    elif meta.get("plan") == "predict":
        source = "predicted"
    probes = meta.get("probes", "")
    values: dict[str, Any] = {
        "board_type": board_type,
        "source": source,
        "date": meta.get("date", ""),
        "probes": int(probes) if probes.isdigit() else None,
        "l4t": meta.get("l4t", ""),
        "serial": meta.get("serial", ""),
    }
    values.update(overrides)
    return Provenance(**values)


def store_from_fleet(fleet_path: str | Path) -> Path | None:
    """``[run] profile_store`` of a fleet TOML (relative to the file), or None when unset.

    Reads only the ``[run]`` table, so a fleet whose devices have no profiles yet (first
    contact) still names its store.
    """
    from fleet.config.fleetfile import run_path, run_value

    raw = run_value(fleet_path, "profile_store")
    return None if raw is None else run_path(str(raw), fleet_path).resolve()


def unverified(rows: Sequence[Row]) -> list[Row]:
    """A sibling's rows as this board must treat them: every ok row ``source=predicted``, so
    ``fleet.trust.verify.select_verified`` probes whatever the selection lands on before
    training."""
    out = []
    for r in rows:
        row = dict(r)
        if str(row.get("status") or "ok").lower() == "ok":
            row["source"] = PREDICTED
        out.append(row)
    return out


def adopt_sibling(
    store: str | Path, device: str, device_type: str, workload: Workload
) -> StoredProfile | None:
    """Give a new ``device`` a starting profile from a sibling of its type, or None.

    The copy is stored under ``device`` with ``source=sibling``, ``probes=0`` and
    ``sibling_of=<the other device>``, its rows marked predicted (:func:`unverified`); the
    device verifies the choice with a few probes and the round stores what it measured.
    """
    found = sibling(store, device_type, workload, exclude=device)
    if found is None:
        return None
    prov = Provenance(
        device_type,
        "sibling",
        probes=0,
        l4t=found.provenance.l4t,
        extra={"sibling_of": found.device},
    )
    return put(store, device, workload, unverified(found.rows), prov, found.comments)


def put_from_device(
    store: str | Path,
    device: str,
    device_type: str,
    workload: Workload,
    csv_text: str,
    **overrides: Any,
) -> StoredProfile:
    """Store the profile CSV a device returned with its reply (first contact, or a refresh).

    Provenance comes from the CSV's own header (:func:`provenance_from_comments`: date,
    probes, plan=predict -> predicted, source=refreshed, l4t/serial where the agent reported
    them); ``overrides`` (e.g. ``l4t=`` from the agent's hello) win over the header.
    """
    _header, _rows, comments = _parse_text(csv_text)
    prov = provenance_from_comments(comments, device_type, **overrides)
    return put(store, device, workload, csv_text, prov)


def starting_profile(
    store: str | Path, device: str, device_type: str, workload: Workload
) -> tuple[str, StoredProfile | None]:
    """What ``device`` starts this round with, and how it got it.

    ``("stored", p)``: its own stored profile (ship it; no profiling). ``("sibling", p)``: none
    of its own, but a board of the same type has one; a copy with every row unverified was just
    stored for it (ship it; the device verifies its choice before training). ``("profile",
    None)``: first contact for this type and workload; the device profiles (predict mode) and
    returns the CSV, which the coordinator stores with :func:`put_from_device`.
    """
    own = get(store, device, workload)
    if own is not None:
        return "stored", own
    copied = adopt_sibling(store, device, device_type, workload)
    if copied is not None:
        return "sibling", copied
    return "profile", None

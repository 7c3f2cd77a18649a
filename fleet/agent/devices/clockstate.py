"""The original GPU clocks, saved on disk before the first write and deleted after the restore.

Why a file: an agent killed with SIGKILL (or a board losing power mid-run) runs no exit path, so
the clock stays pinned, and the next run would otherwise read the pinned bounds as "original" and
restore to them forever. So before the first write the original bounds and governor go to a state
file (atomic: temp file, fsync, rename); every later start restores from a file it finds before
reading anything as original; a clean restore deletes it. The file names the board and devfreq
node it belongs to, and a file from another board is refused rather than applied: foreign bounds
could pin this GPU at clocks its own table does not even hold.

What (format 2): one entry per devfreq node the lock pinned (Thor's GPU is two), each with its
original ``min_freq``/``max_freq``/``governor`` and, where the kernel was found clamping the
GPU at the first lock, ``clamp_hz`` (the clamp itself is never saved as a user limit: see
``clocklock``). The primary node's bounds are repeated at the top level, as format 1 kept them;
a format-1 file (one node, top level only), left by an older powerfleet, is still read and
restored (``load`` gives every record a ``nodes`` list).

Where (``default_state_dir``): a root-owned ``/var/lib/powerfleet`` when running as root (the
boot-time ``powerfleet restore`` unit runs as root), else ``$XDG_STATE_HOME/powerfleet`` or
``~/.local/state/powerfleet``. A sysfs root other than ``/`` (a copied tree, the virtual Jetson)
keeps its state under ``<root>/var/lib/powerfleet``, so a dry run never touches the real board's
state. The directory is created with mode 0700.

Python 3.6 compatible, stdlib only. See docs/architecture.md (device backends).
"""

import json
import os
import tempfile
import time
from typing import Any, Dict, List, Optional

from fleet.agent.devices.base import DeviceError
from fleet.method import liveness

STATE_FILE = "jetson-clocks.json"
FORMAT = "powerfleet-clock-state-2"
FORMAT_1 = "powerfleet-clock-state-1"  # one node, bounds at the top level: still read
IDENTITY_KEYS = ("sysfs_root", "devfreq", "board", "available_hz")
#: The files a restore writes on a node (``governor`` only where the state file saved one).
NODE_FILES = ("available_frequencies", "min_freq", "max_freq")


def default_state_dir(sysfs_root: str = "/") -> str:
    """Where original clocks are saved when no ``--state-dir`` is given (see module docstring)."""
    if sysfs_root and os.path.realpath(sysfs_root) != "/":
        return os.path.join(sysfs_root, "var", "lib", "powerfleet")
    if os.geteuid() == 0:
        return "/var/lib/powerfleet"
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(base, "powerfleet")


def state_path(state_dir: str) -> str:
    return os.path.join(state_dir, STATE_FILE)


def describe_identity(ident: Dict[str, Any]) -> str:
    """A short human name for a board: devfreq node, model string and sysfs root."""
    board = ident.get("board") or "unknown board"
    return "{} on {!r} under {}".format(ident.get("devfreq"), board, ident.get("sysfs_root"))


def save(state_dir: str, identity: Dict[str, Any], bounds: Dict[str, Any]) -> str:
    """Write identity + bounds atomically to the state file; return its path.

    ``bounds`` holds the primary's ``min_freq``/``max_freq``/``governor`` and ``nodes``, one
    dict per pinned node (``devfreq``, ``min_freq``, ``max_freq``, ``governor``, optional
    ``clamp_hz``).

    Raises DeviceError (one line) when the directory cannot be created or written: the caller
    must then not touch the clocks, since nothing could bring them back after a crash.
    """
    record = {"format": FORMAT, "saved_at": time.time()}  # type: Dict[str, Any]
    record.update(liveness.process_identity())
    record.update(identity)
    record.update(bounds)
    return _write_json(state_dir, state_path(state_dir), record, "the original GPU clocks")


def _write_json(state_dir: str, path: str, record: Dict[str, Any], what: str) -> str:
    """Write ``record`` to ``path`` atomically (temp file, fsync, rename, directory fsync)."""
    tmp = None
    try:
        if not os.path.isdir(state_dir):
            os.makedirs(state_dir, mode=0o700)
            os.chmod(state_dir, 0o700)  # makedirs' mode is masked by the umask
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=state_dir)
        with os.fdopen(fd, "w") as fh:
            json.dump(record, fh, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        tmp = None
        _fsync_dir(state_dir)
    except OSError as exc:
        raise DeviceError(
            "cannot save {} to {}: {}; choose a writable --state-dir".format(
                what, path, exc.strerror or exc
            )
        ) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return path


def load(state_dir: str) -> Optional[Dict[str, Any]]:
    """The saved record, or None when there is none. A damaged file is a one-line DeviceError."""
    path = state_path(state_dir)
    try:
        with open(path, "r") as fh:
            text = fh.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DeviceError(
            "cannot read clock state {}: {}".format(path, exc.strerror or exc)
        ) from None
    try:
        record = json.loads(text)
    except ValueError:
        record = None
    ok = isinstance(record, dict) and record.get("format") in (FORMAT, FORMAT_1)
    if ok and record.get("format") == FORMAT_1:
        record["nodes"] = [
            {
                "devfreq": record.get("devfreq"),
                "min_freq": record.get("min_freq"),
                "max_freq": record.get("max_freq"),
                "governor": record.get("governor"),
            }
        ]
    nodes = record.get("nodes") if ok else None
    ok = ok and isinstance(nodes, list) and len(nodes) > 0
    for entry in nodes if ok and isinstance(nodes, list) else ():
        ok = ok and isinstance(entry, dict) and isinstance(entry.get("devfreq"), str)
        for key in ("min_freq", "max_freq"):
            ok = ok and _positive_int(entry.get(key))
    if not ok:
        raise DeviceError(
            "clock state {} is damaged (expected a {} JSON object whose nodes each name their "
            "devfreq entry with integer min_freq and max_freq); check the board's clocks and "
            "remove the file".format(path, FORMAT)
        )
    return record


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def node_names(record: Dict[str, Any]) -> List[str]:
    """The devfreq entries a loaded record restores, primary first."""
    return [str(entry["devfreq"]) for entry in record.get("nodes") or ()]


def missing_node_files(sysfs_root: str, record: Dict[str, Any]) -> List[str]:
    """The nodes of a loaded state record whose files are not (yet) there: ``name`` for a
    missing directory or attribute. Empty when every node can be restored now."""
    base = os.path.join(sysfs_root, "sys/class/devfreq")
    missing = []
    for entry in record.get("nodes") or ():
        want = NODE_FILES + (("governor",) if entry.get("governor") else ())
        path = os.path.join(base, str(entry["devfreq"]))
        if not all(os.path.exists(os.path.join(path, f)) for f in want):
            missing.append(str(entry["devfreq"]))
    return missing


def said(entries: List[Dict[str, Any]]) -> str:
    """The saved bounds of a record's nodes, for a line on stderr."""
    parts = []
    for entry in entries:
        governor = entry.get("governor")
        parts.append(
            "{} (min {:g} MHz, max {:g} MHz{})".format(
                entry["devfreq"],
                int(entry["min_freq"]) / 1e6,
                int(entry["max_freq"]) / 1e6,
                ", governor {}".format(governor) if governor else "",
            )
        )
    return ", ".join(parts)


def clamps_said(entries: List[Dict[str, Any]]) -> str:
    """'' or the clamps a record saw, as a clause for the same line."""
    clamps = [e for e in entries if e.get("clamp_hz")]
    if not clamps:
        return ""
    return (
        "; the kernel clamped {} when it was saved (a thermal or power-mode limit, not a user "
        "limit: not restored as one)".format(
            ", ".join("{} at {:g} MHz".format(e["devfreq"], e["clamp_hz"] / 1e6) for e in clamps)
        )
    )


def check_identity(record: Dict[str, Any], identity: Dict[str, Any], path: str) -> None:
    """Refuse a state file written for another board (one line naming both)."""
    theirs = {k: record.get(k) for k in IDENTITY_KEYS}
    ours = {k: identity.get(k) for k in IDENTITY_KEYS}
    if theirs != ours:
        raise DeviceError(
            "clock state {} belongs to another board ({}), not this one ({}): refusing to restore "
            "foreign clock bounds; use this board's --state-dir or remove the file".format(
                path, describe_identity(theirs), describe_identity(ours)
            )
        )


def remove(state_dir: str) -> None:
    try:
        os.unlink(state_path(state_dir))
    except FileNotFoundError:
        return
    _fsync_dir(state_dir)


def _fsync_dir(path: str) -> None:
    """Make a rename/unlink durable (a power cut right after must not resurrect the old file)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# -- NVML: a GPU's power limit and locked clocks ---------------------------------------------------
NVML_FORMAT = "powerfleet-nvml-state-1"
NVML_PREFIX = "nvml-"


def nvml_state_path(state_dir: str, uuid: str) -> str:
    """One file per GPU, named by its UUID (indices renumber; a UUID does not)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(uuid))
    return os.path.join(state_dir, NVML_PREFIX + safe + ".json")


def save_nvml(state_dir: str, record: Dict[str, Any]) -> str:
    """Save a GPU's original settings before the first change (``uuid``, ``index``, ``gpu``,
    ``power_limit_mw``: the limit found, or None when the limit is not touched;
    ``clocks_locked``: whether a restore must reset locked clocks). One-line DeviceError when it
    cannot be written: the caller must then not touch the card."""
    full = {"format": NVML_FORMAT, "saved_at": time.time()}  # type: Dict[str, Any]
    full.update(liveness.process_identity())
    full.update(record)
    path = nvml_state_path(state_dir, str(record["uuid"]))
    return _write_json(state_dir, path, full, "the GPU's original settings")


def load_nvml(state_dir: str) -> List[Dict[str, Any]]:
    """Every NVML record in ``state_dir`` (each with its ``path``); a damaged one is a
    one-line DeviceError naming it."""
    try:
        names = sorted(os.listdir(state_dir))
    except OSError:
        return []
    out = []
    for name in names:
        if not (name.startswith(NVML_PREFIX) and name.endswith(".json")):
            continue
        path = os.path.join(state_dir, name)
        try:
            with open(path, "r") as fh:
                record = json.loads(fh.read())
        except (OSError, ValueError):
            record = None
        limit = record.get("power_limit_mw") if isinstance(record, dict) else None
        ok = (
            isinstance(record, dict)
            and record.get("format") == NVML_FORMAT
            and isinstance(record.get("uuid"), str)
            and (limit is None or _positive_int(limit))
            and isinstance(record.get("clocks_locked"), bool)
        )
        if not ok:
            raise DeviceError(
                "GPU state {} is damaged (expected a {} JSON object naming the GPU's uuid, an "
                "integer power_limit_mw or null and clocks_locked); check the GPU's settings "
                "(nvidia-smi -q -d POWER,CLOCK) and remove the file".format(path, NVML_FORMAT)
            )
        record["path"] = path
        out.append(record)
    return out


def remove_nvml(state_dir: str, uuid: str) -> None:
    try:
        os.unlink(nvml_state_path(state_dir, uuid))
    except FileNotFoundError:
        return
    _fsync_dir(state_dir)

"""The agent's own directories, and the rule that every path a request names lies inside them.

Why: the agent runs as root on a board, and its requests name files it reads (``data``,
``weights``, ``profile``, ``efficiency``, ``budget_file``) and writes (``out``, ``checkpoint``,
``out_weights``). A request that could name any path could overwrite system files or read
secrets, so the agent owns two directories given on its command line (``--work-dir`` and the
backend's ``--state-dir`` where it has one), creates them 0700, refuses one that is a symlink,
belongs to another user or is writable by group or others, and refuses a request whose path
resolves (symlinks followed) outside them. A relative path is taken inside the work directory.
The refusal is one error reply; the agent keeps serving.

Python 3.6 compatible, stdlib only. See docs/architecture.md (input hardening).
"""

import os
import stat
from typing import Any, Dict, Optional, Sequence

# Request fields that name files, per command-independent meaning; a string in one of these is
# a path (``profile``/``efficiency`` may also be inline rows/objects, which pass untouched).
PATH_KEYS = (
    "out",
    "checkpoint",
    "out_weights",
    "data",
    "weights",
    "budget_file",
    "profile",
    "efficiency",
)
MAX_PATH = 4096


class ConfineError(ValueError):
    """A directory the agent cannot own, or a request path outside its directories."""


def default_work_dir() -> str:
    """Where the agent works when no ``--work-dir`` is given: root's ``/var/lib/powerfleet/work``,
    else ``$XDG_STATE_HOME/powerfleet/agent-work`` (``~/.local/state``); never a shared /tmp."""
    if os.geteuid() == 0:
        return os.path.join("/var/lib/powerfleet", "work")
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(base, "powerfleet", "agent-work")


def owned_dir(path: str, what: str = "work directory") -> str:
    """Create ``path`` 0700 if missing; refuse a symlink, a non-directory, a directory of another
    user, or one writable by group or others. Returns its real absolute path."""
    path = os.path.abspath(os.path.expanduser(path))
    try:
        if not os.path.lexists(path):
            os.makedirs(path, 0o700)
            os.chmod(path, 0o700)  # makedirs' mode is masked by the umask
        st = os.lstat(path)
    except OSError as exc:
        raise ConfineError("cannot create the {} {}: {}".format(what, path, exc.strerror)) from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise ConfineError("the {} {} must be a real directory, not a link".format(what, path))
    if st.st_uid != os.geteuid():
        raise ConfineError(
            "the {} {} belongs to uid {}, not to the agent's uid {}".format(
                what, path, st.st_uid, os.geteuid()
            )
        )
    if st.st_mode & 0o022:
        raise ConfineError(
            "the {} {} is writable by group or others (mode {:o}); chmod 700 it".format(
                what, path, stat.S_IMODE(st.st_mode)
            )
        )
    return os.path.realpath(path)


class Confinement(object):
    """The agent's directories; ``resolve`` maps a request path inside them or refuses it."""

    def __init__(self, work_dir: str, others: Sequence[str] = ()) -> None:
        self.work_dir = work_dir
        self.roots = [work_dir] + [d for d in others if d and d != work_dir]

    @classmethod
    def open(cls, work_dir: Optional[str], state_dir: Optional[str] = None) -> "Confinement":
        """Own the work directory (default ``default_work_dir``) and the state directory."""
        work = owned_dir(work_dir or default_work_dir(), "work directory")
        others = [owned_dir(state_dir, "state directory")] if state_dir else []
        return cls(work, others)

    def resolve(self, key: str, value: Any) -> str:
        """The real path of a request's ``key``; ConfineError when it leaves the directories."""
        if not isinstance(value, str) or not value or len(value) > MAX_PATH or "\0" in value:
            raise ConfineError("'{}' must be a file path, got {!r:.80}".format(key, value))
        joined = value if os.path.isabs(value) else os.path.join(self.work_dir, value)
        real = os.path.realpath(joined)
        for root in self.roots:
            if real.startswith(root.rstrip(os.sep) + os.sep):
                return real
        raise ConfineError(
            "'{}' = {!r:.200} is outside the agent's directories ({})".format(
                key, value, ", ".join(self.roots)
            )
        )

    def request(self, req: Dict[str, Any]) -> Dict[str, Any]:
        """A copy of ``req`` with every path field resolved inside the directories."""
        out = dict(req)
        for key in PATH_KEYS:
            value = out.get(key)
            if isinstance(value, str) and value:
                out[key] = self.resolve(key, value)
            elif key in out and value is not None and key not in ("profile", "efficiency"):
                raise ConfineError("'{}' must be a file path, got {!r:.80}".format(key, value))
        return out

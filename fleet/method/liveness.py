"""Is the process that wrote a state file still running? One rule for every such file.

Why in the kernel: two files outlive the process that writes them, on the board and on the
coordinator alike, and both must tell a live writer from a dead one the same way. The clock
state (``fleet/agent/devices/clockstate.py``) holds a locked GPU's original clocks: a dead
holder's are restored by the next start, a live holder's are left alone. The round state
(``fleet/reports/roundstate.py``) says what a run does now: a run whose writer is gone is
``interrupted``, never ``running``.

A pid alone is not an identity (pids are reused, and a pid from before a reboot names nobody),
so a record holds the pid, the boot id and the process's start time; the round state adds the
host name, since a run directory may be read on another machine (a copy, a shared disk), where
no pid can be checked. A zombie (SIGKILLed, its parent has not reaped it: in a container whose
init reaps nothing it stays one forever) has exited and counts as gone.

Python 3.6 compatible, stdlib only.
"""

import os
import socket
from typing import Any, Dict, Optional

#: ``holder``'s answers: this process, another running process on this host, a writer that no
#: longer runs, or one on another host (nothing here can say whether it runs).
SELF, ALIVE, GONE, ELSEWHERE = "self", "alive", "gone", "elsewhere"


def proc_start(pid: int) -> Optional[str]:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), or None
    when it does not run: gone, or a zombie (an agent SIGKILLed whose parent has not reaped
    it yet has exited and holds nothing, though its /proc entry is still there)."""
    try:
        with open("/proc/{}/stat".format(pid), "r") as fh:
            text = fh.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # the command name may hold spaces
    if not fields or fields[0] in ("Z", "X"):
        return None
    return fields[19] if len(fields) > 19 else None


def boot_id() -> Optional[str]:
    try:
        with open("/proc/sys/kernel/random/boot_id", "r") as fh:
            return fh.read().strip()
    except OSError:
        return None


def process_identity(pid: Optional[int] = None, with_host: bool = False) -> Dict[str, Any]:
    """Who writes: pid plus boot id and start time, so a reused pid is not taken for the
    process that wrote the file (nor one from before a reboot); ``with_host`` adds the host
    name, for files that may be read on another machine."""
    pid = os.getpid() if pid is None else pid
    record = {"pid": pid, "boot_id": boot_id(), "pid_start": proc_start(pid)}  # type: Dict[str, Any]
    if with_host:
        record["host"] = socket.gethostname()
    return record


def holder(record: Dict[str, Any]) -> str:
    """``self`` if this process wrote the record, ``alive`` if another running process on this
    host did, ``gone`` if its writer no longer runs, ``elsewhere`` if it names another host."""
    host = record.get("host")
    if host is not None and host != socket.gethostname():
        return ELSEWHERE
    pid = record.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return GONE
    if record.get("boot_id") != boot_id():
        return GONE
    start = proc_start(pid)
    if start is None or start != record.get("pid_start"):
        return GONE
    return SELF if pid == os.getpid() else ALIVE

"""What every command handler works with: the ``Context`` and the strict argument readers.

Why separate: the commands (``device_commands.py``, ``train_command.py``) and the dispatcher
(``protocol.py``) share these, and they must not import the dispatcher, which imports them. The
readers are strict so a typo in a client fails loudly instead of being ignored: an unknown
argument (the command's kernel record, ``request_of``), a number that is not one, a path that
is not a string are refused with one line naming the argument. Python 3.6 compatible.
"""

import logging
import math
from typing import Any, Callable, Dict, List, Optional

from fleet.agent.devices import capabilities
from fleet.agent.devices.base import Backend
from fleet.agent.protocol.confine import Confinement
from fleet.agent.protocol.wire import ProtocolError
from fleet.method.records import RecordError

log = logging.getLogger("fleet.agent")


class Context(object):
    """What every handler may use: the backend, its kind, and a way to send progress events."""

    def __init__(
        self,
        backend: Backend,
        backend_kind: str,
        write_line: Callable[[Dict[str, Any]], None],
        options: Optional[Dict[str, Any]] = None,
        confine: Optional[Confinement] = None,
    ) -> None:
        self.backend = backend
        # the agent's own directories (``python -m fleet.agent`` always sets them); None only
        # for in-process callers that choose their own paths (tests, the CLI's own process)
        self.confine = confine
        self.backend_kind = backend_kind
        self.options = dict(options or {})  # how the backend was opened, reported by hello
        self.write_line = write_line
        self.request_id = None  # type: Any
        self.stopping = False

    def progress(self, done: int, total: int, **extra: Any) -> None:
        """Send a progress event for the request being served."""
        event = {"id": self.request_id, "event": "progress", "done": done, "total": total}
        event.update(extra)
        self.write_line(event)


Handler = Callable[[Context, Dict[str, Any]], Dict[str, Any]]

# --------------------------------------------------------------------------------------------
# Argument helpers: strict, so a typo in a client fails loudly instead of being ignored.


def request_of(req: Dict[str, Any], record: Any) -> Any:
    """The request's arguments as the command's kernel record (``fleet.method.records``):
    a typo in a client fails loudly instead of being ignored, in one line naming the closest
    known argument."""
    args = dict((k, v) for k, v in req.items() if k not in ("id", "cmd"))
    try:
        return record.from_dict(args, str(req.get("cmd")))
    except RecordError as exc:
        raise ProtocolError(str(exc)) from None


def number(req: Dict[str, Any], key: str, default: Any = None, required: bool = False) -> Any:
    value = req.get(key, default)
    if value is None:
        if required:
            raise ProtocolError("{} needs '{}'".format(req.get("cmd"), key))
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ProtocolError("'{}' must be a number, got {!r}".format(key, value))
    return value


def number_list(req: Dict[str, Any], key: str, default: Any = None) -> Any:
    value = req.get(key, default)
    if value is None:
        return None
    if isinstance(value, str):
        value = [v for v in value.replace(" ", "").split(",") if v]
    if not isinstance(value, (list, tuple)):
        raise ProtocolError("'{}' must be a list of numbers, got {!r}".format(key, value))
    out = []
    for v in value:
        try:
            out.append(float(v))
        except (TypeError, ValueError):
            raise ProtocolError("'{}' must hold numbers, got {!r}".format(key, v)) from None
    return out


def path_arg(req: Dict[str, Any], key: str, required: bool = False) -> Optional[str]:
    value = req.get(key)
    if value is None:
        if required:
            raise ProtocolError("{} needs '{}' (a file path)".format(req.get("cmd"), key))
        return None
    if not isinstance(value, str) or not value:
        raise ProtocolError("'{}' must be a file path, got {!r}".format(key, value))
    return value


def int_arg(req: Dict[str, Any], key: str, required: bool = False) -> Optional[int]:
    value = number(req, key, required=required)
    if value is None:
        return None
    if value != int(value):
        raise ProtocolError("'{}' must be an integer, got {!r}".format(key, value))
    return int(value)


def bool_arg(req: Dict[str, Any], key: str, default: bool) -> bool:
    value = req.get(key, default)
    if not isinstance(value, bool):
        raise ProtocolError("'{}' must be true or false, got {!r}".format(key, value))
    return value


def torch_device(ctx: Context, req: Dict[str, Any], notes: List[str]) -> str:
    """The requested torch device; on a GPU backend without CUDA in torch, the CPU with a note."""
    device = req.get("device")
    if device:
        return str(device)
    if capabilities(ctx.backend_kind).torch_device != "cuda":
        return "cpu"
    import torch

    if torch.cuda.is_available():
        return "cuda"
    notes.append("torch sees no CUDA GPU; training runs on the CPU (clocks and rails still apply)")
    log.warning("%s", notes[-1])
    return "cpu"

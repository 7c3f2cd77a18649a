"""The agent's JSON-lines protocol: one request per line in, exactly one response per request out.

Why JSON lines over stdio: the hardware client starts the agent as a child process, possibly
under the board's own Python 3.6 interpreter, so the channel must need nothing beyond the
standard library on either side, survive any interpreter mismatch and be easy to replay in tests.

Request:  ``{"id": N, "cmd": "hello"|"profile"|"lock"|"restore"|"power"|"train"|"shutdown",
          ...args}`` (``HANDLERS`` is the authoritative list; ``hello`` reports it)
Response: ``{"id": N, "ok": true, ...}`` or ``{"id": N, "ok": false, "error": "one line"}``
Events:   ``{"id": N, "event": "progress", "done": k, "total": n}`` before a long command's
          final response; a closed-loop train's add ``running_batch_size``/``running_freq_mhz``
          (the point running now) and ``budget_w``.

Commands are plain functions ``handler(ctx, request) -> dict`` in ``HANDLERS``; adding one is
one dict entry. A handler raises to fail; the server turns the exception into a one-line error
response and keeps serving. stdout carries protocol lines only.

This module is the dispatch: the command table, ``hello`` (which reports it), one request in and
one response out, and the serving loop. The line format is ``wire.py``; what handlers share is
``handler_api.py``; the commands are ``device_commands.py`` and ``train_command.py``.
"""

import json
import logging
import os
import platform
import socket
from typing import IO, Any, Dict, List, Optional  # noqa: F401 - List in type comments

from fleet.agent.devices.base import Backend
from fleet.agent.protocol.device_commands import (
    handle_lock,
    handle_power,
    handle_profile,
    handle_restore,
    handle_shutdown,
)
from fleet.agent.protocol.handler_api import Context, Handler  # noqa: F401 - Handler in a type comment
from fleet.agent.protocol.train_command import handle_train
from fleet.agent.protocol.wire import (
    MAX_LINE_BYTES,
    USER_ERRORS,
    ProtocolError,
    error_line,
    parse_request,
    read_line,
)

PROTOCOL_VERSION = "1"

log = logging.getLogger("fleet.agent")


def handle_hello(ctx: Context, req: Dict[str, Any]) -> Dict[str, Any]:
    """What this agent can do, on which device, under which interpreter.

    The one lenient command: a newer client may introduce itself with fields this agent does
    not know, and the handshake must still succeed so the client can see what is supported.
    """
    torch_version = None
    cuda = None
    try:
        import torch

        torch_version = str(torch.__version__)
        cuda = bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - a replay-only agent runs without torch
        pass
    try:
        from fleet.agent.models.registry import MODEL_NAMES

        models = list(MODEL_NAMES)  # type: List[str]
    except Exception:  # noqa: BLE001
        models = []
    backend = ctx.backend
    return {
        "capabilities": {
            "commands": sorted(HANDLERS),
            "backend": ctx.backend_kind,
            "frequencies": [float(f) for f in backend.frequencies()],
            # A replaying backend carries recorded power with every point, even before a lock.
            "power": backend.read_power_w() is not None
            or callable(getattr(backend, "measure", None)),
            "models": models,
            "cuda": cuda,
        },
        "versions": {
            "protocol": PROTOCOL_VERSION,
            "python": platform.python_version(),
            "torch": torch_version,
        },
        "device": backend.describe(),
        "backend_options": ctx.options,
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }


HANDLERS = {
    "hello": handle_hello,
    "profile": handle_profile,
    "lock": handle_lock,
    "restore": handle_restore,
    "power": handle_power,
    "shutdown": handle_shutdown,
    "train": handle_train,
}  # type: Dict[str, Handler]


# --------------------------------------------------------------------------------------------
# Serving


def handle_request(ctx: Context, line: Any) -> Optional[Dict[str, Any]]:
    """Parse one line (bytes or str) and run its command; return the response (None if blank)."""
    if not line.strip():
        return None
    try:
        req = parse_request(line)
    except ProtocolError as exc:
        return {"id": None, "ok": False, "error": error_line(exc)}
    rid = req.get("id")
    ctx.request_id = rid
    cmd = req.get("cmd")
    handler = HANDLERS.get(cmd) if isinstance(cmd, str) else None
    if handler is None:
        return {
            "id": rid,
            "ok": False,
            "error": "unknown command {} (known: {})".format(
                json.dumps(cmd), ", ".join(sorted(HANDLERS))
            ),
        }
    try:
        if ctx.confine is not None:  # every path a request names stays in the agent's dirs
            req = ctx.confine.request(req)
        result = handler(ctx, req)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:  # noqa: BLE001 - every failure becomes one error response
        if not isinstance(exc, USER_ERRORS):
            log.exception("command %s failed", cmd)
        return {"id": rid, "ok": False, "error": error_line(exc)}
    finally:
        ctx.request_id = None
    response = {"id": rid, "ok": True}
    response.update(result or {})
    response["id"] = rid
    response["ok"] = True
    return response


def serve(ctx: Context, stdin: IO[Any]) -> int:
    """Answer requests until EOF or shutdown; restore the device on the way out. Returns 0.

    Lines end only at ``\\n``: a text stream would also end them at a bare CR (universal
    newlines) and split one request into two, so a stream with a binary ``buffer`` (stdin) is
    read as bytes. A hostile line (too long, too deep, not UTF-8, not an object) gets an error
    reply and the loop goes on. A client that goes away (closed pipe) ends the loop like EOF
    does: nobody is left to answer.
    """
    source = getattr(stdin, "buffer", stdin)
    try:
        while not ctx.stopping:
            line, too_long = read_line(source)
            if line is None:
                log.info("stdin closed: shutting down")
                break
            if too_long:
                response = {
                    "id": None,
                    "ok": False,
                    "error": "request longer than {} bytes; ignored".format(MAX_LINE_BYTES),
                }  # type: Optional[Dict[str, Any]]
            else:
                response = handle_request(ctx, line)
            if response is not None:
                ctx.write_line(response)
    except BrokenPipeError:
        log.warning("client closed the pipe: shutting down")
    finally:
        restore_quietly(ctx.backend)
    return 0


def restore_quietly(backend: Backend) -> None:
    """Restore on an exit path, logging (not raising) a failure so the exit itself completes."""
    try:
        backend.restore()
    except Exception as exc:  # noqa: BLE001 - an exit path must not raise
        log.error("could not restore device settings: %s", error_line(exc))

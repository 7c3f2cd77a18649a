"""The agent's JSON-lines protocol: one request per line in, exactly one response per request out.

Why JSON lines over stdio: the hardware client starts the agent as a child process, possibly
under the board's own Python 3.6 interpreter, so the channel must need nothing beyond the
standard library on either side, survive any interpreter mismatch and be easy to replay in tests.

Request:  ``{"id": N, "cmd": "hello"|"profile"|"lock"|"restore"|"power"|"train"|"shutdown",
          ...args}`` (``HANDLERS`` is the authoritative list; ``hello`` reports it)
Response: ``{"id": N, "ok": true, ...}`` or ``{"id": N, "ok": false, "error": "one line"}``
Events:   ``{"id": N, "event": "progress", "done": k, "total": n}`` before a long command's
          final response.

Commands are plain functions ``handler(ctx, request) -> dict`` in ``HANDLERS``; adding one is
one dict entry (``train`` is added that way at the end of this module). A handler raises to
fail; the server turns the exception into a one-line error response and keeps serving. stdout
carries protocol lines only.
"""

import json
import logging
import math
import os
import platform
import socket
import time
from typing import IO, Any, Callable, Dict, List, Optional, Tuple

from .confine import Confinement
from .devices import capabilities
from .devices.base import Backend, DeviceError
from .profile_io import ProfileFormatError
from .tensorfile import json_depth

PROTOCOL_VERSION = "1"

log = logging.getLogger("fleet.agent")


class ProtocolError(ValueError):
    """A request the agent cannot act on (bad JSON, unknown command, bad argument)."""


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

_RESERVED = ("id", "cmd")


def _check_args(req: Dict[str, Any], allowed: List[str]) -> None:
    unknown = sorted(k for k in req if k not in _RESERVED and k not in allowed)
    if unknown:
        raise ProtocolError(
            "unknown argument(s) for {}: {} (allowed: {})".format(
                req.get("cmd"), ", ".join(unknown), ", ".join(allowed) or "none"
            )
        )


def _number(req: Dict[str, Any], key: str, default: Any = None, required: bool = False) -> Any:
    value = req.get(key, default)
    if value is None:
        if required:
            raise ProtocolError("{} needs '{}'".format(req.get("cmd"), key))
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ProtocolError("'{}' must be a number, got {!r}".format(key, value))
    return value


def _number_list(req: Dict[str, Any], key: str, default: Any = None) -> Any:
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


# --------------------------------------------------------------------------------------------
# Handlers


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
        from .models import MODEL_NAMES

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


_PROFILE_ARGS = [
    "model",
    "input_shape",
    "batch_sizes",
    "freqs",
    "budget_w",
    "steps",
    "warmup",
    "sampler_hz",
    "num_classes",
    "device",
    "out",
    "rows",
    "predict",
    "max_probes",
]


def handle_profile(ctx: Context, req: Dict[str, Any]) -> Dict[str, Any]:
    """Profile a model (paper §4.1); returns the rows and, with "out", writes the CSV there.

    ``"rows": false`` leaves the rows out of the response (the CSV is enough for big grids).
    ``"device"`` is the torch device; by default CUDA on GPU backends, the CPU otherwise.
    """
    from .profile_writer import write_profile
    from .profiler import DEFAULT_BATCH_SIZES, profile_grid

    _check_args(req, _PROFILE_ARGS)
    model = req.get("model")
    if not isinstance(model, str) or not model:
        raise ProtocolError("profile needs 'model' (a model name)")
    batch_sizes = _number_list(req, "batch_sizes", list(DEFAULT_BATCH_SIZES))
    if any(b != int(b) for b in batch_sizes):
        raise ProtocolError("'batch_sizes' must be integers, got {}".format(batch_sizes))
    notes = []  # type: List[str]
    device = _torch_device(ctx, req, notes)  # like train: no CUDA in torch -> the CPU, noted
    out = req.get("out")
    if out is not None and (not isinstance(out, str) or not out):
        raise ProtocolError("'out' must be a file path")

    def progress(done: int, total: int, row: Optional[Dict[str, Any]]) -> None:
        ctx.progress(done, total)

    result = profile_grid(
        ctx.backend,
        model,
        input_shape=req.get("input_shape"),
        batch_sizes=[int(b) for b in batch_sizes],
        freqs=_number_list(req, "freqs"),
        steps=int(_number(req, "steps", 5)),
        warmup=int(_number(req, "warmup", 2)),
        budget_w=_number(req, "budget_w"),
        sampler_hz=float(_number(req, "sampler_hz", 20.0)),
        num_classes=_number(req, "num_classes"),
        device=str(device),
        progress=progress,
        predict=bool(req.get("predict", False)),  # probe a design, predict the rest
        max_probes=None if req.get("max_probes") is None else int(_number(req, "max_probes")),
    )
    if out:
        write_profile(out, result.rows, result.metadata)
    response = {
        "probes": result.probes,
        "grid_size": result.grid_size,
        "saved": result.grid_size - result.probes,
        "path": out,
        "metadata": result.metadata,
        "notes": notes,
    }  # type: Dict[str, Any]
    if req.get("rows", True):
        response["rows"] = result.rows
    return response


def handle_lock(ctx: Context, req: Dict[str, Any]) -> Dict[str, Any]:
    """Pin the GPU at one of the backend's frequencies (``"freq_mhz"``)."""
    _check_args(req, ["freq_mhz"])
    freq = float(_number(req, "freq_mhz", required=True))
    ctx.backend.lock(freq)
    return {"freq_mhz": freq}


def handle_restore(ctx: Context, req: Dict[str, Any]) -> Dict[str, Any]:
    """Give the device its original frequency settings back."""
    _check_args(req, [])
    ctx.backend.restore()
    return {"restored": True}


def handle_power(ctx: Context, req: Dict[str, Any]) -> Dict[str, Any]:
    """One reading of the configured rail; ``power_w`` is null where power is not measurable."""
    _check_args(req, [])
    value = ctx.backend.read_power_w()
    return {"power_w": value, "available": value is not None, "time": time.time()}


def handle_shutdown(ctx: Context, req: Dict[str, Any]) -> Dict[str, Any]:
    """Restore the device and stop serving after this response."""
    _check_args(req, [])
    ctx.backend.restore()
    ctx.stopping = True
    return {"restored": True}


HANDLERS = {
    "hello": handle_hello,
    "profile": handle_profile,
    "lock": handle_lock,
    "restore": handle_restore,
    "power": handle_power,
    "shutdown": handle_shutdown,
}  # type: Dict[str, Handler]


# --------------------------------------------------------------------------------------------
# Serving

# Errors whose message is already a sentence for the user; others get their type name in front.
_USER_ERRORS = (ProtocolError, DeviceError, ProfileFormatError, ValueError, OSError)


def error_line(exc: BaseException) -> str:
    """One line that says what went wrong, for the ``error`` field."""
    text = " ".join(str(exc).split())
    if not isinstance(exc, _USER_ERRORS) or not text:
        text = "{}: {}".format(type(exc).__name__, text) if text else type(exc).__name__
    return text


# Bounds on one request line: requests are small (tensors travel as files), so anything bigger
# or deeper is hostile or broken, and is answered with an error before the JSON parser sees it.
MAX_LINE_BYTES = 1 << 20
MAX_DEPTH = 32
MAX_INT_DIGITS = 40


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError("integer with more than {} digits".format(MAX_INT_DIGITS))
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if math.isinf(value) or math.isnan(value):
        raise ValueError("number {} is out of range".format(text[:40]))
    return value


def _parse_constant(name: str) -> Any:
    raise ValueError("{} is not a number JSON allows".format(name))


def parse_request(line: Any) -> Dict[str, Any]:
    """One request line (bytes or str) -> the request object, or ProtocolError naming why.

    Bounded before parsing (length, nesting depth, integer digits) because Python's JSON parser
    recurses per nesting level and converts integers in quadratic time; NaN, Infinity and
    overflowing numbers are refused because no command means anything by them.
    """
    if isinstance(line, bytes):
        if len(line) > MAX_LINE_BYTES:
            raise ProtocolError("request longer than {} bytes".format(MAX_LINE_BYTES))
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(
                "request is not valid UTF-8 (byte {} of the line)".format(exc.start)
            ) from None
    if len(line) > MAX_LINE_BYTES:
        raise ProtocolError("request longer than {} bytes".format(MAX_LINE_BYTES))
    depth = json_depth(line)
    if depth > MAX_DEPTH:
        raise ProtocolError("request nested {} levels deep (at most {})".format(depth, MAX_DEPTH))
    try:
        req = json.loads(
            line.lstrip("\ufeff"),
            parse_int=_parse_int,
            parse_float=_parse_float,
            parse_constant=_parse_constant,
        )
    except (ValueError, RecursionError) as exc:
        raise ProtocolError("bad JSON: {}".format(error_line(exc))) from None
    if not isinstance(req, dict):
        raise ProtocolError("a request must be a JSON object")
    return req


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
        if not isinstance(exc, _USER_ERRORS):
            log.exception("command %s failed", cmd)
        return {"id": rid, "ok": False, "error": error_line(exc)}
    finally:
        ctx.request_id = None
    response = {"id": rid, "ok": True}
    response.update(result or {})
    response["id"] = rid
    response["ok"] = True
    return response


def encode(obj: Dict[str, Any]) -> str:
    """One JSON line; NaN/inf become null so any JSON parser (and Python 3.6's) accepts it."""
    return json.dumps(_clean(obj), default=str, separators=(",", ":"))


def _clean(obj: Any) -> Any:
    if isinstance(obj, float) and (math.isnan(obj) or math.isinf(obj)):
        return None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def line_writer(stream: IO[str]) -> Callable[[Dict[str, Any]], None]:
    def write(obj: Dict[str, Any]) -> None:
        stream.write(encode(obj) + "\n")
        stream.flush()

    return write


def read_line(stream: Any, limit: int = MAX_LINE_BYTES) -> Tuple[Optional[Any], bool]:
    """The next line without its newline, and whether it was over ``limit`` (then cut short).

    ``(None, False)`` at EOF. A line over the limit is read to its end and dropped, so the next
    request starts where it should; memory stays bounded by ``limit``.
    """
    chunk = stream.readline(limit + 1)
    if not chunk:
        return None, False
    newline = b"\n" if isinstance(chunk, bytes) else "\n"
    if chunk.endswith(newline):
        return chunk[:-1], False
    if len(chunk) <= limit:
        return chunk, False  # the last line, without a newline
    while True:
        rest = stream.readline(1 << 16)
        if not rest or rest.endswith(newline):
            return chunk[:limit], True


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


# --------------------------------------------------------------------------------------------
# Training (appended with the trainer; registered below so the code above stays as it was)

_TRAIN_ARGS = [
    "model",
    "input_shape",
    "num_classes",
    "vocab_size",
    "model_options",
    "weights",
    "data",
    "batch_size",
    "lr",
    "optimizer",
    "target_accuracy",
    "eval_every_samples",
    "max_samples",
    "seed",
    "checkpoint",
    "out_weights",
    "freq_mhz",
    "device",
    "task",
    "eval_batch_size",
    "eval_at_start",
    "sampler_hz",
    # closed loop (any budget argument turns it on; batch_size/lr are then the reference pair)
    "budget_w",
    "budget_schedule",
    "budget_file",
    "profile",
    "efficiency",
    "objective",
    "deadline_s",
    "guard_window_s",
    "drift",
    "drift_time_tol",
    "drift_power_tol",
    "refreshed_profile",
]


def _path_arg(req: Dict[str, Any], key: str, required: bool = False) -> Optional[str]:
    value = req.get(key)
    if value is None:
        if required:
            raise ProtocolError("{} needs '{}' (a file path)".format(req.get("cmd"), key))
        return None
    if not isinstance(value, str) or not value:
        raise ProtocolError("'{}' must be a file path, got {!r}".format(key, value))
    return value


def _int_arg(req: Dict[str, Any], key: str, required: bool = False) -> Optional[int]:
    value = _number(req, key, required=required)
    if value is None:
        return None
    if value != int(value):
        raise ProtocolError("'{}' must be an integer, got {!r}".format(key, value))
    return int(value)


def _bool_arg(req: Dict[str, Any], key: str, default: bool) -> bool:
    value = req.get(key, default)
    if not isinstance(value, bool):
        raise ProtocolError("'{}' must be true or false, got {!r}".format(key, value))
    return value


def _load_train_data(path: str) -> Any:
    """The coordinator's .pt file: {"train": (x, y), "test": (x, y)} of tensors."""
    import torch

    from .trainer import torch_load_cpu

    if not os.path.isfile(path):
        raise ProtocolError("data file {} not found".format(path))
    try:
        blob = torch_load_cpu(path)
    except Exception as exc:  # noqa: BLE001 - one clear line for any unreadable file
        raise ProtocolError(
            "data file {} is unreadable: {}".format(path, error_line(exc))
        ) from None
    ok = isinstance(blob, dict) and all(
        isinstance(blob.get(s), (list, tuple))
        and len(blob[s]) == 2
        and all(isinstance(t, torch.Tensor) for t in blob[s])
        for s in ("train", "test")
    )
    if not ok:
        raise ProtocolError(
            'data file {} must hold {{"train": (x, y), "test": (x, y)}} tensors'.format(path)
        )
    return tuple(blob["train"]), tuple(blob["test"])


def _closed_loop_args(req: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The closed loop's inputs, or None for a fixed (batch, freq) run; all checked up front."""
    from .budget import BudgetError, make_source
    from .choose import ChooseError, efficiency_from, lut_from_rows

    keys = ("budget_w", "budget_schedule", "budget_file")
    if all(req.get(k) is None for k in keys):
        for k in ("profile", "efficiency", "objective", "deadline_s", "guard_window_s"):
            if req.get(k) is not None:
                raise ProtocolError(
                    "'{}' needs a budget (budget_w, budget_schedule or budget_file)".format(k)
                )
        return None
    if req.get("freq_mhz") is not None:
        raise ProtocolError("'freq_mhz' and a budget exclude each other (the loop picks clocks)")
    try:
        source = make_source(
            None if req.get("budget_w") is None else str(req["budget_w"]),
            None if req.get("budget_schedule") is None else str(req["budget_schedule"]),
            _path_arg(req, "budget_file"),
            warn=lambda m: log.warning("%s", m),
        )
        prof = req.get("profile")
        if isinstance(prof, str) and prof:
            points = lut_from_rows((r for _, r in _csv_rows(prof)), prof)
        elif isinstance(prof, list):
            points = lut_from_rows(prof, "profile rows")
        else:
            raise ProtocolError("a closed-loop train needs 'profile' (rows or a CSV path)")
        eff = req.get("efficiency")
        if isinstance(eff, str) and eff:
            rows = [r for _, r in _csv_rows(eff)]
            eff = {r.get("batch_size"): r.get("samples_to_accuracy") for r in rows}
            efficiency = efficiency_from(eff, req["efficiency"])
        elif isinstance(eff, dict):
            efficiency = efficiency_from(eff, "efficiency")
        else:
            raise ProtocolError(
                "a closed-loop train needs 'efficiency' ({batch: samples}, "
                '{"batch_sizes": [...], "samples_to_accuracy": [...]} or a CSV path)'
            )
    except (BudgetError, ChooseError) as exc:
        raise ProtocolError(str(exc)) from None
    objective = str(req.get("objective") or "time")
    if objective not in ("time", "energy", "deadline"):
        raise ProtocolError(
            "'objective' must be time, energy or deadline, got {!r}".format(objective)
        )
    deadline_s = _deadline_arg(req, objective, points)
    return {
        "source": source,
        "points": points,
        "efficiency": efficiency,
        "objective": objective,
        "deadline_s": deadline_s,
        "guard_window_s": float(_number(req, "guard_window_s", 0.2)),
        "drift": _drift_args(req, prof),
    }


def _deadline_arg(req: Dict[str, Any], objective: str, points: List[Any]) -> Optional[float]:
    """``deadline_s`` (seconds from the loop's start): required by, and only for, the deadline
    objective, which also needs the profile's power (``deadline.py``)."""
    from .choose import ChooseError
    from .deadline import check_deadline_s, check_power

    raw = req.get("deadline_s")
    if objective != "deadline":
        if raw is not None:
            raise ProtocolError("'deadline_s' is only for objective deadline")
        return None
    if raw is None:
        raise ProtocolError("objective deadline needs 'deadline_s' (seconds from the start)")
    try:
        deadline_s = check_deadline_s(raw, "'deadline_s'")
        check_power(points, "profile")
    except ChooseError as exc:
        raise ProtocolError(str(exc)) from None
    return deadline_s


def _drift_args(req: Dict[str, Any], prof: Any) -> Dict[str, Any]:
    """The loop's drift watch (``driftwatch.py``): on unless ``drift`` is false; the profile's
    rows and header are kept so the refreshed file is the same table, refreshed."""
    if not _bool_arg(req, "drift", True):
        return {"off": True}
    out = {
        "time_tol": float(_number(req, "drift_time_tol", 0.10)),
        "power_tol": float(_number(req, "drift_power_tol", 0.08)),
        "out_path": _path_arg(req, "refreshed_profile"),
    }  # type: Dict[str, Any]
    if not out["time_tol"] > 0 or not out["power_tol"] > 0:
        raise ProtocolError("'drift_time_tol' and 'drift_power_tol' must be > 0")
    if isinstance(prof, str):
        from .profile_io import read_rows

        _header, numbered, comments = read_rows(prof)
        out["rows"], out["comments"] = [r for _, r in numbered], comments
    else:
        out["rows"] = [dict(r) for r in prof]
    return out


def _csv_rows(path: str) -> Any:
    from .profile_io import read_rows

    if not os.path.isfile(path):
        raise ProtocolError("file {} not found".format(path))
    return read_rows(path)[1]


def _torch_device(ctx: Context, req: Dict[str, Any], notes: List[str]) -> str:
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


def handle_train(ctx: Context, req: Dict[str, Any]) -> Dict[str, Any]:
    """Fine-tune to the target accuracy at a locked frequency; the response is the TrainResult.

    Tensors travel as files (JSON lines cannot carry them cheaply): ``weights`` is a state_dict
    file (absent: the model's seeded initial weights), ``data`` a .pt file of
    ``{"train": (x, y), "test": (x, y)}``, ``out_weights`` where the fine-tuned state_dict goes.
    ``lr`` is used as given (the coordinator applies the batch-size rule). ``freq_mhz`` is locked
    for the whole run and the device restored afterwards, on errors too. ``time_s`` (training
    time, evaluation excluded, as the paper reports) and ``accuracy`` (final) are aliases the
    hardware client reads.

    Closed loop (``closedloop.py``): with ``budget_w`` (watts or "none"), ``budget_schedule``
    ("0:7,600:4.5") or ``budget_file`` plus ``profile`` (rows or a CSV path) and ``efficiency``
    ({batch: samples}, {"batch_sizes", "samples_to_accuracy"} lists, or a CSV path), optional
    ``objective`` (time|energy|deadline, the last with ``deadline_s``) and ``guard_window_s``:
    the agent selects, locks, follows the budget and guards the rail; ``batch_size``/``lr`` are
    the learning-rate reference pair. The response adds ``segments``, ``guard_events``,
    ``drift_events``, ``loop_time_s``, ``loop_energy_j`` and ``notes``, and for the deadline
    ``predicted_finish_s``, ``late`` and ``behind_at_s``; ``status`` may be ``over-budget``
    (checkpoint kept).
    """
    from .models import MODELS, build_model, canonical_name
    from .trainer import TrainerError, atomic_torch_save, torch_load_cpu, train_to_target

    _check_args(req, _TRAIN_ARGS)
    model_arg = req.get("model")
    if not isinstance(model_arg, str) or not model_arg:
        raise ProtocolError("train needs 'model' (a model name)")
    name = canonical_name(model_arg)
    data_path = _path_arg(req, "data", required=True)
    weights = _path_arg(req, "weights")
    checkpoint = _path_arg(req, "checkpoint")
    out_weights = _path_arg(req, "out_weights")
    batch_size = _int_arg(req, "batch_size", required=True)
    lr = _number(req, "lr", required=True)
    target = _number(req, "target_accuracy", required=True)
    freq = _number(req, "freq_mhz")
    model_options = req.get("model_options") or {}
    if not isinstance(model_options, dict):
        raise ProtocolError("'model_options' must be an object, got {!r}".format(model_options))
    task = req.get("task") or ("char" if MODELS[name].kind == "text" else "classification")
    loop_args = _closed_loop_args(req)
    notes = []  # type: List[str]
    device = _torch_device(ctx, req, notes)
    seed = _int_arg(req, "seed") or 0

    train_set, test_set = _load_train_data(str(data_path))
    shape = req.get("input_shape") or list(train_set[0].shape[1:])
    classes = _number(req, "vocab_size", _number(req, "num_classes"))
    model = build_model(
        name, num_classes=None if classes is None else int(classes), input_shape=shape,
        seed=seed, **model_options
    )  # fmt: skip
    if weights is not None:
        if not os.path.isfile(weights):
            raise ProtocolError("weights file {} not found".format(weights))
        state = torch_load_cpu(weights)
        if not isinstance(state, dict):
            raise ProtocolError("weights file {} must hold a state_dict".format(weights))
        try:
            model.load_state_dict(state)
        except RuntimeError as exc:
            raise TrainerError(
                "weights {} do not fit {}: {}".format(weights, name, error_line(exc)[:300])
            ) from None

    def progress(done: int, total: int, info: Dict[str, Any]) -> None:
        ctx.progress(done, total, **info)

    train_options = {
        "batch_size": int(batch_size),
        "lr": float(lr),
        "target_accuracy": float(target),
        "optimizer": str(req.get("optimizer") or "adam"),
        "eval_every_samples": _int_arg(req, "eval_every_samples"),
        "max_samples": _int_arg(req, "max_samples"),
        "seed": seed,
        "device": str(device),
        "checkpoint_path": checkpoint,
        "task": str(task),
        "eval_batch_size": _int_arg(req, "eval_batch_size"),
        "eval_at_start": _bool_arg(req, "eval_at_start", True),
        "sampler_hz": float(_number(req, "sampler_hz", 20.0)),
    }  # type: Dict[str, Any]

    # Every argument is checked above: from here on the device is locked, and restored on exit.
    backend = ctx.backend
    if loop_args is not None:
        return _train_closed_loop(
            ctx,
            req,
            model,
            train_set,
            test_set,
            train_options,
            loop_args,
            name,
            task,
            device,
            notes,
            checkpoint,
            out_weights,
        )
    set_workload = getattr(backend, "set_workload", None)
    locked = None  # type: Optional[float]
    try:
        if freq is not None:
            locked = float(freq)  # set first: a lock that fails half-way is restored too
            backend.lock(locked)
        if callable(set_workload):
            set_workload(int(batch_size))  # the replay backend's power depends on it
        power_read = backend.read_power_w if backend.read_power_w() is not None else None
        result = train_to_target(
            model, train_set, test_set, power_read=power_read, progress=progress, **train_options
        )
    finally:
        try:
            if callable(set_workload):
                set_workload(None)
        finally:
            if locked is not None:
                backend.restore()
    if out_weights is not None:
        atomic_torch_save({k: v.detach().cpu() for k, v in model.state_dict().items()}, out_weights)
    response = result.to_dict()
    response.update(
        {
            "time_s": result.train_time_s,
            "accuracy": result.final_accuracy,
            "model": name,
            "task": task,
            "device": str(device),
            "freq_mhz": locked,
            "restored": locked is not None,
            "power_measured": power_read is not None,
            "checkpoint": checkpoint,
            "out_weights": out_weights,
            "notes": notes,
        }
    )
    return response


def _train_closed_loop(
    ctx: Context,
    req: Dict[str, Any],
    model: Any,
    train_set: Any,
    test_set: Any,
    train_options: Dict[str, Any],
    loop_args: Dict[str, Any],
    name: str,
    task: str,
    device: str,
    notes: List[str],
    checkpoint: Optional[str],
    out_weights: Optional[str],
) -> Dict[str, Any]:
    from .closedloop import OBJECTIVE_KEYS, ClosedLoopError, train_under_budget
    from .trainer import atomic_torch_save

    opts = dict(train_options)
    ref_batch, lr = opts.pop("batch_size"), opts.pop("lr")
    hz = opts.pop("sampler_hz")
    try:
        result, summary = train_under_budget(
            ctx.backend, model, train_set, test_set, loop_args["points"],
            loop_args["efficiency"], loop_args["source"], ref_batch, lr,
            objective=loop_args["objective"], guard_window_s=loop_args["guard_window_s"],
            deadline_s=loop_args["deadline_s"], sampler_hz=hz,
            log=lambda m: log.warning("%s", m), drift=loop_args["drift"], **opts
        )  # fmt: skip
    except ClosedLoopError as exc:
        raise ProtocolError(str(exc)) from None
    if out_weights is not None:
        atomic_torch_save({k: v.detach().cpu() for k, v in model.state_dict().items()}, out_weights)
    response = result.to_dict()
    response.update(
        {
            "status": summary["status"],
            "time_s": result.train_time_s,
            "accuracy": result.final_accuracy,
            "model": name,
            "task": task,
            "device": str(device),
            "batch_size": summary["batch_size"],
            "lr_ref_batch": ref_batch,
            "freq_mhz": summary["freq_mhz"],
            "restored": True,
            "power_measured": summary["power_samples"] > 0,
            "checkpoint": checkpoint,
            "out_weights": out_weights,
            "segments": summary["segments"],
            "guard_events": summary["guard_events"],
            "drift_events": summary["drift_events"],
            "refreshes": summary["refreshes"],
            "refreshed_profile": summary["refreshed_profile"],
            "refreshed_profile_csv": summary["refreshed_profile_csv"]
            if summary["refreshes"]
            else None,
            "loop_time_s": summary["time_s"],
            "loop_energy_j": summary["energy_j"],
            "loop_peak_power_w": summary["peak_power_w"],
            "stop_reason": summary["stop_reason"],
            **{k: summary[k] for k in OBJECTIVE_KEYS},
            "notes": notes + summary["notes"],
        }
    )
    return response


HANDLERS["train"] = handle_train

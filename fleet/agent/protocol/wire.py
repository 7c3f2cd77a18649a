"""The agent's line format: how a request line is read and parsed, how a response line is written.

Why separate: these are the rules of the channel itself, the same for every command: a request is
one JSON object on one line, bounded before parsing (length, nesting, integer digits) because a
hostile or broken client must not hang or crash the agent; a response is one JSON line that any
parser (Python 3.6's too) accepts; an error is one line (``error_line``). Dispatch
(``protocol.py``) and the commands build on it. Python 3.6 compatible, stdlib only.
"""

import json
import math
from typing import IO, Any, Callable, Dict, Optional, Tuple

from fleet.agent.data.tensorfile import json_depth
from fleet.agent.devices.base import DeviceError
from fleet.method.profile_io import ProfileFormatError


class ProtocolError(ValueError):
    """A request the agent cannot act on (bad JSON, unknown command, bad argument)."""


# Errors whose message is already a sentence for the user; others get their type name in front.
USER_ERRORS = (ProtocolError, DeviceError, ProfileFormatError, ValueError, OSError)


def error_line(exc: BaseException) -> str:
    """One line that says what went wrong, for the ``error`` field."""
    text = " ".join(str(exc).split())
    if not isinstance(exc, USER_ERRORS) or not text:
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
    """Write each object as one protocol line on ``stream``, flushed at once."""

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

"""The fuzz harness: outcome classes, the timed call that sorts an outcome, the run loop.

Every fuzz target family (``fuzz_csv.py``, ``fuzz_fleet.py``, ``fuzz_budget.py``,
``fuzz_tensors.py``, ``fuzz_agent.py``, and ``fuzz_names.py``) is a :class:`Format` whose
``run_one`` feeds one mutated input to a loader through :func:`classify_call`, which sorts it
into ``clean``, ``accepted``, ``impossible``, ``traceback`` or ``hang`` (see ``fuzz.py``).
Separate from the families so each of them, and both drivers, share one definition of an
outcome and one time limit.
"""

from __future__ import annotations

import importlib
import math
import random
import resource
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROFILE_SEED = ROOT / "simulations" / "profiles" / "nano_resnet18.csv"
EFFICIENCY_SEED = ROOT / "simulations" / "efficiency" / "resnet18_cinic.csv"
MAX_INPUT = 8 << 20  # the harness's own memory: no mutated input grows past this
OUTCOMES = ("clean", "accepted", "impossible", "traceback", "hang")


class Timeout(BaseException):
    """Raised by the interval timer inside a loader that runs too long (BaseException: a
    loader's ``except Exception`` must not swallow it)."""


def on_alarm(signum, frame):  # noqa: ARG001 - signal handler signature
    raise Timeout()


def project_errors() -> tuple[type, ...]:
    """The error types whose one-line message the CLI/agent shows a user as is."""
    names = [
        ("fleet.common.errors", "InputError"),
        ("fleet.method.profile_io", "ProfileFormatError"),
        ("fleet.agent.training.train_state", "TrainerError"),
        ("fleet.agent.data.dataerror", "DatasetError"),
        ("fleet.agent.protocol.wire", "ProtocolError"),
        ("fleet.agent.devices.base", "DeviceError"),
        ("fleet.agent.data.tensorfile", "TensorFileError"),
    ]
    out = []
    for mod, name in names:
        try:
            out.append(getattr(importlib.import_module(mod), name))
        except (ImportError, AttributeError):
            continue
    return tuple(out)


def classify_call(fn: Callable[[], object], check: Callable[[object], str | None], limit_s: float):
    """Run ``fn`` under a time limit; return (outcome, detail)."""
    try:
        return _classify(fn, check, limit_s)
    except Timeout:  # the timer fired just as the call ended: over the limit all the same
        signal.setitimer(signal.ITIMER_REAL, 0)
        return "hang", f"over {limit_s:g} s"


def _classify(fn, check, limit_s: float):
    errors = project_errors()
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        result = fn()
    except Timeout:
        return "hang", f"over {limit_s:g} s"
    except MemoryError:
        return "hang", "memory cap"
    except errors as exc:
        msg = str(exc)
        if not msg.strip() or "\n" in msg or "\r" in msg:
            return "traceback", f"{type(exc).__name__} with a multi-line message: {msg[:200]!r}"
        return "clean", msg[:200]
    except Exception as exc:  # noqa: BLE001 - this is what we count
        return "traceback", f"{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        problem = check(result)
    except Exception as exc:  # noqa: BLE001 - the check reading a half-valid result
        problem = f"result unreadable by the check: {type(exc).__name__}: {exc}"
    if problem:
        return "impossible", problem
    return "accepted", ""


def finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


class Format:
    """One input format: seeds, mutators, the loader a user reaches and the physical check."""

    name = ""
    available = True
    why_skipped = ""

    def inputs(self, rng: random.Random, n: int):
        raise RuntimeError("subclass")


def set_memory_cap(gib: float) -> None:
    """Cap this process's address space so a count blow-up fails fast instead of eating RAM."""
    with open("/proc/self/status") as fh:
        vm = next(int(ln.split()[1]) * 1024 for ln in fh if ln.startswith("VmSize:"))
    cap = vm + int(gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, resource.getrlimit(resource.RLIMIT_AS)[1]))


def fuzz_format(fmt: Format, n: int, seed: int, limit_s: float, examples: int):
    rng = random.Random(seed)
    counts = Counter()
    samples: dict[str, list[str]] = {o: [] for o in OUTCOMES}
    kept: dict[str, list[bytes]] = {o: [] for o in OUTCOMES}
    t0 = time.perf_counter()
    for _ in range(n):
        outcome, detail, data = fmt.run_one(rng, limit_s)
        counts[outcome] += 1
        if (
            outcome != "accepted"
            and len(samples[outcome]) < examples
            and detail not in samples[outcome]
        ):
            samples[outcome].append(detail)
        if len(kept[outcome]) < 100 and len(data) < 65536:  # the CLI sample's pool
            kept[outcome].append(data)
    return counts, samples, kept, time.perf_counter() - t0


def print_entry(name: str, entry: dict) -> None:
    n = entry["n"]
    cells = "  ".join(f"{o} {entry[o]:5d} ({100.0 * entry[o] / max(1, n):5.1f}%)" for o in OUTCOMES)
    print("{:15s} n={:<6d} {}  [{:.0f} s]".format(name, n, cells, entry["seconds"]), flush=True)
    for key in ("cli", "live_agent"):
        if key in entry:
            print("{:15s}   {}: {}".format("", key, entry[key]), flush=True)
    for outcome, texts in entry["examples"].items():
        if outcome in ("impossible", "traceback", "hang"):
            for t in texts:
                print("{:15s}   e.g. {}: {}".format("", outcome, t[:160]), flush=True)

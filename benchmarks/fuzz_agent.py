"""Fuzz target family: the agent's JSON request lines.

Hostile lines (deep nesting, huge or non-finite numbers, invalid UTF-8, stray CRs, truncation,
duplicate keys, binary) fed in-process to ``protocol.serve`` on the replay backend, each
followed by a ``hello`` that must still be answered; and a sample into a live
``python -m fleet.agent --backend replay`` through a pipe.
"""

from __future__ import annotations

import io
import json
import math
import os
import random
import select
import subprocess
import sys
import time
from collections import Counter

from benchmarks.fuzz_harness import PROFILE_SEED, ROOT, Format, classify_call

AGENT_SEEDS = [
    {"id": 1, "cmd": "hello"},
    {"id": 2, "cmd": "power"},
    {"id": 3, "cmd": "lock", "freq_mhz": 921.6},
    {"id": 4, "cmd": "restore"},
    {"id": 5, "cmd": "train", "model": "small_cnn", "data": "/nonexistent/d.pt",
     "batch_size": 16, "lr": 0.001, "target_accuracy": 0.9},
    {"id": 6, "cmd": "lock", "freq_mhz": 76.8},
]  # fmt: skip


def agent_line(rng: random.Random) -> bytes:
    """One hostile request line (without its trailing newline)."""
    req = dict(rng.choice(AGENT_SEEDS))
    op = rng.randrange(14)
    if op == 0:
        depth = rng.choice([50, 1000, 100_000, 400_000])
        return b"[" * depth + b"]" * depth if rng.random() < 0.5 else b'{"a":' * depth + b"1"
    if op == 1:
        return json.dumps({**req, "pad": "x" * rng.choice([100_000, 2_000_000])}).encode()
    if op == 2:
        raw = json.dumps(req).encode()
        i = rng.randrange(len(raw) + 1)
        return raw[:i] + rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80"]) + raw[i:]
    if op == 3:
        return rng.choice([b"1", b"[]", b'"hello"', b"null", b"true", b"[{}]", b"1e999"])
    if op == 4:
        key = rng.choice([k for k in req if k not in ("id", "cmd")] or ["freq_mhz"])
        req[key] = rng.choice([float("nan"), float("inf"), -float("inf")])
        return json.dumps(req).encode()  # Python writes NaN/Infinity tokens
    if op == 5:
        raw = json.dumps(req).encode()
        i = raw.find(b",") + 1 or len(raw) // 2
        return raw[:i] + rng.choice([b"\r", b"\r\r", b" \r "]) + raw[i:]
    if op == 6:
        key = rng.choice(list(req))
        req[key] = rng.choice(
            [None, [], {}, "x", -1, 0, 10**400 if False else 10**30, True, [1] * 100, "\u0000"]
        )
        return json.dumps(req).encode()
    if op == 7:
        raw = json.dumps(req).encode()
        return raw[: rng.randrange(len(raw) + 1)]
    if op == 8:
        return b"\xef\xbb\xbf" + json.dumps(req).encode()
    if op == 9:
        return json.dumps(req).encode()[:-1] + b',"id":"dup"}'
    if op == 10:
        req["freq_mhz"] = rng.choice([-1, 0, 1e-320, 1e308, "921.6", 921])
        return json.dumps(req).encode()
    if op == 11:
        return b"1" * rng.choice([5000, 100_000])  # a huge integer literal
    if op == 12:
        req["extra"] = {"deep": json.loads("[" * 200 + "]" * 200)}
        return json.dumps(req).encode()
    return bytes(rng.randrange(256) for _ in range(rng.randint(1, 200))).replace(b"\n", b" ")


def _nonfinite(obj) -> bool:
    if isinstance(obj, float):
        return not math.isfinite(obj)
    if isinstance(obj, dict):
        return any(_nonfinite(v) for v in obj.values())
    if isinstance(obj, list):
        return any(_nonfinite(v) for v in obj)
    return False


def _expected_requests(line: bytes) -> int:
    return 0 if not line.strip(b" \t\r\x0b\x0c") else 1


def agent_format(tmp: str):
    from fleet.agent.devices import open_backend
    from fleet.agent.protocol import server as protocol
    from fleet.agent.protocol.handler_api import Context

    class Fmt(Format):
        name = "agent lines"

        def run_one(self, rng, limit_s):
            line = agent_line(rng)
            backend = open_backend("replay", profile_csv=str(PROFILE_SEED))
            out: list[dict] = []
            ctx = Context(backend, "replay", out.append, {"profile_csv": "p"})
            stream = io.BytesIO(line + b"\n" + b'{"id":"probe","cmd":"hello"}\n')
            stdin = io.TextIOWrapper(stream, encoding="utf-8", errors="replace")

            def go():
                protocol.serve(ctx, stdin)
                return out

            def check(responses):
                n = _expected_requests(line)
                probe = [r for r in responses if r.get("id") == "probe"]
                if not probe or not probe[-1].get("ok"):
                    return "the agent stopped answering (no reply to the hello after this line)"
                if len(responses) != n + 1:
                    return f"{len(responses) - 1} replies to one line (a line split in two)"
                if n and responses[0].get("ok"):
                    try:
                        req = json.loads(line.decode("utf-8-sig"))
                    except ValueError:
                        return "an unparseable line was answered ok"
                    if _nonfinite(req):
                        return "a request with a non-finite number was answered ok"
                return None

            outcome, detail = classify_call(go, check, limit_s)
            if outcome == "accepted" and out and not out[0].get("ok"):
                err = str(out[0].get("error", ""))
                outcome, detail = ("clean", err[:200]) if "\n" not in err else ("traceback", err)
            return outcome, detail, line

    return Fmt()


class LiveAgent:
    """A real ``python -m fleet.agent --backend replay`` reading from a pipe."""

    def __init__(self) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fleet.agent", "--backend", "replay",
             "--profile-csv", str(PROFILE_SEED)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
        )  # fmt: skip
        self.buf = b""

    def replies_until(self, probe: str, timeout_s: float) -> list[dict] | None:
        out = []
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                try:
                    obj = json.loads(line)
                except ValueError:
                    obj = {"unparseable": True}
                if obj.get("event"):
                    continue
                out.append(obj)
                if obj.get("id") == probe:
                    return out
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self.buf += chunk

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def live_agent_sample(k: int, seed: int, limit_s: float) -> Counter:
    """Hostile lines into a live agent, each followed by a hello that must be answered."""
    rng = random.Random(seed)
    counts = Counter()
    agent = LiveAgent()
    try:
        for i in range(k):
            line = agent_line(rng)
            probe = f"probe-{i}"
            try:
                agent.proc.stdin.write(line + b"\n")
                agent.proc.stdin.write(json.dumps({"id": probe, "cmd": "hello"}).encode() + b"\n")
                agent.proc.stdin.flush()
            except BrokenPipeError:
                replies = None
            else:
                replies = agent.replies_until(probe, limit_s * 20)
            if replies is None:
                try:
                    agent.proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    pass
                counts["traceback" if agent.proc.poll() is not None else "hang"] += 1
                agent.close()
                agent = LiveAgent()
                continue
            n = _expected_requests(line)
            if len(replies) != n + 1:
                counts["impossible"] += 1  # a line answered twice (split) or not at all
            elif n and replies[0].get("ok"):
                counts["accepted"] += 1
            else:
                counts["clean"] += 1
    finally:
        agent.close()
    return counts

#!/usr/bin/env python3
"""A stand-in for the on-device agent that speaks its JSON-lines protocol but answers as told.

Why it exists: the coordinator and the hardware client must survive a board that replies
nonsense (NaN, negative or huge energy, samples as text, a 10 MB line, a status nobody knows),
one that dies mid-train, one that never answers, and one that is merely slow. The real agent
never does any of that, so this script does it on purpose, over the same pipe the hardware
client uses (``fleet/agent/protocol/server.py``: one request per line in, one response per request
out, progress events before a long command's answer).

How a hardware node runs it: its node config's ``agent-python`` names an executable that the
client starts as ``AGENT_PYTHON -m fleet.agent --backend ... --work-dir DIR``; a two-line shell
wrapper (``tests/fault_helpers.hostile_agent_python``) runs this file with ``--mode`` and
``--delay-s`` in front of those arguments, which this script ignores (except ``--work-dir``).

    hostile_agent.py [--mode MODE] [--delay-s S] [anything the client adds]
    (or HOSTILE_AGENT_MODE / HOSTILE_AGENT_DELAY_S in the environment)

Modes (``MODES``): ``ok`` (an honest reply), ``nan-energy``, ``negative-energy``,
``huge-energy``, ``samples-string``, ``big-message`` (a ~10 MB note in the reply),
``unknown-status``, ``exit`` (exits 3 mid-train), ``hang`` (never answers train). ``--delay-s``
delays the train answer (progress events every second meanwhile), so a round lasts that long.
With ``--work-dir`` it writes ``DIR/hostile-agent.json`` ({pid, mode, state: started | training
| replied}) so a test can wait until the board is mid-train before it injects a fault.

Stdlib only and no import of ``fleet``: it plays a foreign program on the board.
"""

import json
import os
import sys
import time

MODES = (
    "ok",
    "nan-energy",
    "negative-energy",
    "huge-energy",
    "samples-string",
    "big-message",
    "unknown-status",
    "exit",
    "hang",
)
BIG_BYTES = 10 * 1024 * 1024
STATUS_FILE = "hostile-agent.json"
COMMANDS = ["hello", "lock", "power", "profile", "restore", "shutdown", "train"]


def options(argv):
    """(mode, delay_s, work_dir) from argv, falling back to the environment."""
    mode = os.environ.get("HOSTILE_AGENT_MODE", "ok")
    delay = os.environ.get("HOSTILE_AGENT_DELAY_S", "0")
    work = None
    for i, arg in enumerate(argv[:-1]):
        if arg == "--mode":
            mode = argv[i + 1]
        elif arg == "--delay-s":
            delay = argv[i + 1]
        elif arg == "--work-dir":
            work = argv[i + 1]
    if mode not in MODES:
        sys.stderr.write(f"hostile agent: unknown mode {mode!r} (known: {MODES})\n")
        sys.exit(2)
    return mode, float(delay), work


def mark(work, mode, state):
    """Tell a waiting test where this agent is (atomic: write then rename)."""
    if not work:
        return
    path = os.path.join(work, STATUS_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump({"pid": os.getpid(), "mode": mode, "state": state, "t": time.time()}, fh)
    os.replace(tmp, path)


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")  # allow_nan: NaN goes out as a bare token
    sys.stdout.flush()


def budget_of(req):
    """The request's first budget in watts (None: no limit)."""
    text = str(req.get("budget_w") or "")
    if not text and req.get("budget_schedule"):
        text = str(req["budget_schedule"]).split(",")[0].split(":")[-1]
    try:
        return float(text)
    except ValueError:
        return None


def honest(req):
    """What a well-behaved board would reply: the fastest profiled point under the budget,
    trained to the shipped efficiency's samples, timed and charged by that profile row."""
    budget = budget_of(req)
    eff = {int(b): n for b, n in (req.get("efficiency") or {}).items() if n}
    rows = [
        r
        for r in req.get("profile") or []
        if int(r["batch_size"]) in eff
        and (budget is None or (r.get("peak_power_w") or 0.0) <= budget)
    ]
    if not rows:
        return {"status": "not reached", "samples": 0, "time_s": 0.0, "energy_j": 0.0}

    def secs(r):
        return eff[int(r["batch_size"])] / int(r["batch_size"]) * r["time_per_batch_s"]

    best = min(rows, key=secs)
    time_s = secs(best)
    power = best.get("mean_power_w") or best["peak_power_w"]
    seg = {
        "start_s": 0.0,
        "end_s": time_s,
        "batch_size": int(best["batch_size"]),
        "freq_mhz": best["freq_mhz"],
        "budget_w": budget,
        "reason": "start",
    }
    return {
        "status": "reached",
        "samples": eff[int(best["batch_size"])],
        "accuracy": req.get("target_accuracy"),
        "time_s": time_s,
        "energy_j": power * time_s,
        "peak_power_w": best["peak_power_w"],
        "mean_power_w": power,
        "segments": [seg],
        "guard_events": [],
    }


def hostile(mode, reply):
    """The honest reply, spoiled as ``mode`` says."""
    if mode == "nan-energy":
        reply["energy_j"] = float("nan")
    elif mode == "negative-energy":
        reply["energy_j"] = -5.0e4
    elif mode == "huge-energy":
        reply["energy_j"] = 1.0e308
    elif mode == "samples-string":
        reply["samples"] = "a great many"
    elif mode == "big-message":
        reply["notes"] = ["x" * BIG_BYTES]
    elif mode == "unknown-status":
        reply["status"] = "exploded"
    return reply


def train(rid, req, mode, delay_s, work):
    mark(work, mode, "training")
    steps = int(delay_s) + 1
    start = time.monotonic()
    for k in range(steps):
        if mode == "exit" and time.monotonic() - start >= delay_s / 2:
            sys.stderr.write("hostile agent: exiting mid-train as told\n")
            sys.exit(3)
        send({"id": rid, "event": "progress", "done": k, "total": steps})
        time.sleep(max(0.0, min(1.0, delay_s - (time.monotonic() - start))))
    if mode == "exit":
        sys.stderr.write("hostile agent: exiting mid-train as told\n")
        sys.exit(3)
    while mode == "hang":
        time.sleep(3600)
    reply = hostile(mode, honest(req))
    mark(work, mode, "replied")
    return reply


def hello():
    return {
        "capabilities": {
            "commands": COMMANDS,
            "backend": "replay",
            "frequencies": [],
            "power": True,
            "models": [],
            "cuda": False,
        },
        "versions": {"protocol": "1", "python": sys.version.split()[0], "torch": None},
        "device": {"hostile": True},
        "host": "hostile",
        "pid": os.getpid(),
    }


def main(argv):
    mode, delay_s, work = options(argv)
    mark(work, mode, "started")
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            rid, cmd = req.get("id"), req.get("cmd")
        except (ValueError, AttributeError):
            send({"id": None, "ok": False, "error": "bad request"})
            continue
        if cmd == "hello":
            out = hello()
        elif cmd == "train":
            out = train(rid, req, mode, delay_s, work)
        elif cmd in ("lock", "restore", "power"):
            out = {}
        elif cmd == "shutdown":
            send({"id": rid, "ok": True})
            return 0
        else:
            send({"id": rid, "ok": False, "error": f"hostile agent: {cmd} not supported"})
            continue
        out.update(id=rid, ok=True)
        send(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

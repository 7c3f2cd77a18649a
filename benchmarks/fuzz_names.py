"""Fuzz the surfaces that carry device/run names and file paths (issue 12, names and paths).

``benchmarks/fuzz.py`` mutates files (profile/efficiency CSV, fleet TOML, budget files,
tensor files, agent lines); this adds the in-memory surfaces it does not reach, with the same
outcome classes (``fuzz_harness.classify_call``): a SuperNode's node config
(``spec_from_node_config``), the coordinator's train instruction (``decode_instruction``) and
the agent's path fields (``fleet.agent.protocol.confine``: an accepted path must resolve inside the
agent's work directory).
Goal: 0 tracebacks, 0 impossible acceptances, 0 hangs.

    PYTHONPATH=$PWD python benchmarks/fuzz_names.py --n 10000
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# the fuzz harness's outcome classes, its hostile values and the fleet check
from benchmarks import fuzz_fleet, fuzz_harness, fuzz_mutators  # noqa: E402

HOSTILE = fuzz_mutators.HOSTILE + [
    "../../../x", "/etc/passwd", "a/b", "..", ".", "nano-1\n", "x" * 70, "x" * 5000, "\x00",
    "nano 1", "-n", "ok-name", "0:7,600:4.5", "0:nan", "0:7,0:5", "none", "inf", "1e-320",
]  # fmt: skip
VALUES: list[object] = HOSTILE + [  # what a ConfigRecord may hold besides text
    None, True, 0, -1, 3, 2**63, 1.5, float("nan"), float("inf"), -0.0, [], [1, 2], [float("nan")],
    ["a"], b"\x00",
]  # fmt: skip


def mutate_dict(rng: random.Random, base: dict, keys: list[str]) -> dict:
    out = dict(base)
    for _ in range(rng.randint(1, 3)):
        action = rng.random()
        key = rng.choice(keys)
        if action < 0.15:
            out.pop(key, None)
        else:
            out[key] = rng.choice(VALUES)
    return out


def check_spec(spec) -> str | None:
    if not fuzz_fleet.SAFE_NAME.match(spec.name) or ".." in spec.name:
        return f"device name {spec.name!r} accepted"
    if spec.budget_w is not None and (not math.isfinite(spec.budget_w) or spec.budget_w <= 0):
        return f"budget {spec.budget_w} accepted"
    for text in (spec.profile, spec.data or ""):
        if len(text) > 4096 or "\x00" in text:
            return f"path {text[:40]!r} accepted"
    return None


def check_instruction(ins) -> str | None:
    run = ins.run if ins.run.name else SimpleNamespace(**{**vars(ins.run), "name": "unnamed"})
    # an empty run-name is "not given" on the wire (the fleet file's runs always have one)
    return fuzz_fleet.check_fleet(SimpleNamespace(run=run, devices=())) or (
        None if ins.run.seed >= 0 and ins.run.rounds >= 1 else "bad seed/rounds accepted"
    )


class NodeConfig(fuzz_harness.Format):
    name = "node config"
    base = {"device-name": "nano-1", "device-type": "jetson-nano", "budget-w": "4.5",
            "profile": "/p.csv", "data": "/d.csv", "budget-schedule": "0:4.5,600:3"}  # fmt: skip

    def run_one(self, rng, limit_s):
        from clients.records import spec_from_node_config

        nc = mutate_dict(rng, self.base, list(self.base) + ["learning"])
        call = lambda: spec_from_node_config(nc)  # noqa: E731
        return (*fuzz_harness.classify_call(call, check_spec, limit_s), repr(nc).encode())


class Instruction(fuzz_harness.Format):
    name = "train instr."

    def __init__(self) -> None:
        from clients import records
        from fleet.config.fleetfile import load_fleet
        from fleet.core.efficiency import load_efficiency
        from strategies import coordinator

        root = Path(__file__).resolve().parents[1] / "simulations"
        fleet = load_fleet(root / "fleets" / "default.toml")
        shipped = load_efficiency(fleet.run.efficiency)
        self.base = dict(records.encode_instruction(coordinator.instruction_for(fleet, shipped)))
        self.records = records

    def run_one(self, rng, limit_s):
        from flwr.app import ConfigRecord

        cfg = mutate_dict(rng, self.base, list(self.base))
        try:
            record = ConfigRecord({k: v for k, v in cfg.items() if v is not None})
        except Exception:  # noqa: BLE001 - Flower refuses the value itself: never reaches us
            return "clean", "ConfigRecord refused the value", repr(cfg).encode()
        call = lambda: self.records.decode_instruction(record)  # noqa: E731
        return (*fuzz_harness.classify_call(call, check_instruction, limit_s), repr(cfg).encode())


class AgentPaths(fuzz_harness.Format):
    name = "agent paths"

    def __init__(self, tmp: str) -> None:
        from fleet.agent.protocol.confine import Confinement, owned_dir

        self.work = owned_dir(os.path.join(tmp, "work"))
        os.symlink("/etc", os.path.join(self.work, "etc-link"))
        self.box = Confinement(self.work)

    def run_one(self, rng, limit_s):
        from fleet.agent.protocol.confine import PATH_KEYS, ConfineError
        from fleet.common.errors import InputError

        pieces = ["..", "etc-link", "/etc", "a", "", ".", "/", "\x00", self.work, "x" * 300]
        req = {"cmd": "train"}
        for key in rng.sample(PATH_KEYS, rng.randint(1, 3)):
            if rng.random() < 0.2:
                req[key] = rng.choice(VALUES)
            else:
                req[key] = "/".join(rng.choice(pieces) for _ in range(rng.randint(1, 5)))

        def call():
            try:
                return self.box.request(req)
            except ConfineError as exc:
                raise InputError(str(exc)) from None

        def check(out) -> str | None:
            for key in PATH_KEYS:
                value = out.get(key)
                if (
                    isinstance(value, str)
                    and value
                    and not os.path.realpath(value).startswith(self.work + os.sep)
                ):
                    return f"{key}={req[key]!r:.60} accepted outside the work dir"
            return None

        return (*fuzz_harness.classify_call(call, check, limit_s), repr(req).encode())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2000, help="inputs per surface (goal: 10000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit-s", type=float, default=10.0)
    p.add_argument("--examples", type=int, default=3)
    args = p.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="fuzz-names-")
    bad = 0
    for fmt in (NodeConfig(), Instruction(), AgentPaths(tmp)):
        counts, samples, _, secs = fuzz_harness.fuzz_format(
            fmt, args.n, args.seed, args.limit_s, args.examples
        )
        entry = {"n": args.n, "seconds": secs, "examples": {o: s for o, s in samples.items() if s}}
        entry.update({o: counts[o] for o in fuzz_harness.OUTCOMES})
        fuzz_harness.print_entry(fmt.name, entry)
        bad += sum(counts[o] for o in ("impossible", "traceback", "hang"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

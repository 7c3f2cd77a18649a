"""Fuzz target family: the fleet TOML.

TOML-aware mutators (hostile values for any key, the repeated device's ``count``, duplicated
tables and keys), the physical check of a loaded fleet (:func:`check_fleet`, which
``fuzz_names.py`` reuses for the run settings) and the format that loads each mutated file
with ``load_fleet``.
"""

from __future__ import annotations

import os
import random
import re
import shutil

from benchmarks.fuzz_harness import EFFICIENCY_SEED, PROFILE_SEED, Format, classify_call, finite
from benchmarks.fuzz_mutators import mutate

SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
KNOWN_OPTIMIZERS = ("adam", "adamw", "sgd")


def check_fleet(fleet) -> str | None:
    run = fleet.run
    if not SAFE_NAME.match(str(run.name)) or ".." in str(run.name):
        return f"run name {run.name!r} accepted"
    if not finite(run.lr_ref) or run.lr_ref <= 0:
        return f"lr_ref {run.lr_ref} accepted"
    if not isinstance(run.lr_ref_batch, int) or run.lr_ref_batch <= 0:
        return f"lr_ref_batch {run.lr_ref_batch} accepted"
    if not finite(run.target_accuracy) or not 0 < run.target_accuracy <= 1:
        return f"target_accuracy {run.target_accuracy} accepted"
    if str(run.optimizer).lower() not in KNOWN_OPTIMIZERS:
        return f"optimizer {run.optimizer!r} accepted"
    if not isinstance(run.rounds, int) or not 1 <= run.rounds <= 10**6:
        return f"rounds {run.rounds} accepted"
    if len(fleet.devices) > 100_000:
        return f"{len(fleet.devices)} devices accepted"
    for d in fleet.devices:
        if not SAFE_NAME.match(str(d.name)) or ".." in str(d.name):
            return f"device name {d.name!r} accepted"
        if d.budget_w is not None and (not finite(d.budget_w) or d.budget_w <= 0):
            return f"budget_w {d.budget_w} accepted"
        for step in d.schedule:
            if not finite(step.at_s) or step.at_s < 0:
                return f"schedule time {step.at_s} accepted"
            if step.budget_w is not None and (not finite(step.budget_w) or step.budget_w <= 0):
                return f"schedule budget {step.budget_w} accepted"
    return None


def fleet_format(tmp: str):
    from fleet.config.fleetfile import load_fleet

    shutil.copy(PROFILE_SEED, os.path.join(tmp, "p.csv"))
    shutil.copy(EFFICIENCY_SEED, os.path.join(tmp, "e.csv"))
    seed = (
        b'# fleet\n[run]\nname = "fuzz-run"\nmodel = "resnet18"\nefficiency = "e.csv"\n'
        b'target_accuracy = 0.9\nmode = "local"\nobjective = "time"\nrounds = 1\n'
        b'optimizer = "adam"\nlr_ref_batch = 128\nlr_ref = 5e-4\n\n'
        b'[[devices]]\nname = "nano-a"\ntype = "jetson-nano"\nbudget_w = 4.5\n'
        b'profile = "p.csv"\ndata = "e.csv"\n\n'
        b'[[devices]]\nname = "nano-b"\ntype = "jetson-nano"\nbudget_w = "none"\n'
        b'profile = "p.csv"\ndata = "e.csv"\n\n'
        b'[[devices]]\nname = "nano-c"\ntype = "jetson-nano"\n'
        b'budget_schedule = [[0, 7.0], [3000, 4.5]]\nprofile = "p.csv"\ndata = "e.csv"\ncount = 3\n'
    )
    toml_values = [
        "nan", "inf", "-inf", "1e309", "0", "-1", "0.0", '""', '"../../x"', '"a/b"', '"none"',
        '"NONE"', "[1, [2, [3]]]", "[" * 3000 + "]" * 3000, "{a = 1}", "true", "9999999999",
        "1e-320", '"x' + "y" * 100000 + '"', "[[0, 7.0], [0, 4.5]]", "[[-5, 7.0]]",
        "[[0, nan]]", "[]", "'\\u0000'", '"\\u0000"', "1979-05-27", "0x10", "2.5", '"adamw"',
        '"rmsprop"', '".."', '"/etc/passwd"', "-0.0", "100000000000",
    ]  # fmt: skip

    def m_value(rng: random.Random, data: bytes) -> bytes:
        lines = data.decode("utf-8", "surrogateescape").split("\n")
        idx = [i for i, ln in enumerate(lines) if "=" in ln]
        if not idx:
            return data
        i = rng.choice(idx)
        key = lines[i].split("=", 1)[0]
        lines[i] = key + "= " + rng.choice(toml_values)
        return "\n".join(lines).encode("utf-8", "surrogateescape")

    def m_count(rng: random.Random, data: bytes) -> bytes:
        """The repeated device's ``count``: nothing, wrong types, or far too many devices."""
        n = rng.choice(["0", "-2", "2.5", "1000000000", "10000000000000", "50001", '"3"'])
        return data.replace(b"count = 3", f"count = {n}".encode())

    def m_dup_table(rng: random.Random, data: bytes) -> bytes:
        text = data.decode("utf-8", "surrogateescape")
        j = text.find("[[devices]]")
        return (text + "\n" + text[j:]).encode("utf-8", "surrogateescape") if j >= 0 else data

    def m_dup_key(rng: random.Random, data: bytes) -> bytes:
        return data + b"budget_w = 3\n"

    class Fmt(Format):
        name = "fleet TOML"

        def run_one(self, rng, limit_s):
            data = mutate(rng, seed, [m_value, m_value, m_count, m_dup_table, m_dup_key])
            path = os.path.join(tmp, "fuzz.toml")
            with open(path, "wb") as fh:
                fh.write(data)
            return (*classify_call(lambda: load_fleet(path), check_fleet, limit_s), data)

    return Fmt()

"""The kernel stand-in never tears nor loses a write, wherever in its poll the write lands.

Why: the stand-in and its writers (a test, powerfleet) share plain files, and a loaded machine
may hold either side between any two file operations for as long as it likes. Two flakes came
from that: a JetPack 4 lock read half old, half new ("min > max": rejected, the lock undone,
the closed loop's guard then stepping down a clock the budget did not ask for), and a PM-QoS
request overwritten by the stand-in's own answer (the rails never reaching the pinned clock's
power). Here the interleavings are made, not waited for: the writer's file operations are run
*inside* the stand-in's poll, before its k-th file operation, for every k over three polls, so
the verdict does not depend on how fast anything runs.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from simulations import virtual_devfreq
from simulations.virtual_devfreq import NodeState
from simulations.virtual_sysfs import write_devfreq

TABLE = (76800000, 153600000, 230400000, 307200000, 384000000, 460800000, 537600000)
LOW, MID, HIGH = TABLE[1], TABLE[3], TABLE[5]


class Interleaver:
    """Counts the stand-in's file operations and runs the writer's steps scheduled before them."""

    def __init__(self, schedule: dict[int, list]) -> None:
        self.schedule = schedule
        self.n = 0

    def hit(self) -> None:
        for step in self.schedule.pop(self.n, []):
            step()
        self.n += 1


class CountingOs:
    """``os`` as the stand-in's module sees it, each file operation a point the writer may
    take."""

    OPS = ("stat", "open", "fstat", "pread", "replace")

    def __init__(self, il: Interleaver) -> None:
        self._il = il

    def __getattr__(self, name: str):
        real = getattr(os, name)
        if name not in self.OPS:
            return real

        def op(*args, **kw):
            self._il.hit()
            return real(*args, **kw)

        return op


class Writer:
    """A writer's ``open(path, "w")`` (truncates) and its ``write`` + ``close``, as two steps."""

    def __init__(self, node: Path) -> None:
        self.node = node
        self.fh: dict[str, object] = {}

    def open(self, attr: str):
        return lambda: self.fh.__setitem__(attr, open(self.node / attr, "w"))  # noqa: SIM115

    def write(self, attr: str, hz: int):
        def step() -> None:
            fh = self.fh.pop(attr)
            fh.write(str(hz))
            fh.close()

        return step


def pair_steps(w: Writer, hz: int, current_min: int) -> list:
    """min/max = ``hz`` in the order every kernel accepts (raising: max first), four steps."""
    order = ("min_freq", "max_freq") if hz < current_min else ("max_freq", "min_freq")
    return [s for attr in order for s in (w.open(attr), w.write(attr, hz))]


def schedules(n_ops: int) -> list[tuple[int, int, int, int]]:
    """Where the four steps go (non-decreasing op indices): each file's open and write together
    or a few operations apart, the second file at or after the first, over ``n_ops``."""
    out = set()
    for p in range(n_ops):
        for gap in (0, 1, 2, 4):
            for split in (0, 1, 3):
                a = (p, p + split)  # first file: open, write
                b = (a[1] + gap, a[1] + gap + split)  # second file
                out.add(a + b)
    return sorted(s for s in out if s[-1] < n_ops)


def run_case(tmp_path: Path, rules: str, before: int, after: int, at: tuple, monkeypatch) -> tuple:
    """A node pinned at ``before`` (written, not yet polled), then the writer's pair ``after``
    with its steps before the stand-in's operations ``at``; polls until all ran, then three
    more. Returns the node."""
    node = write_devfreq(tmp_path, "gpu", TABLE)
    state = NodeState(node, TABLE, rules)
    for attr in ("max_freq", "min_freq") if before >= TABLE[0] else ():
        (node / attr).write_text(str(before))  # the previous lock, seen by the first poll
    w = Writer(node)
    steps = pair_steps(w, after, before)
    schedule: dict[int, list] = {}
    for i, step in zip(at, steps, strict=True):
        schedule.setdefault(i, []).append(step)
    il = Interleaver(schedule)
    monkeypatch.setattr(virtual_devfreq, "os", CountingOs(il))
    real_read = virtual_devfreq.read_int
    monkeypatch.setattr(virtual_devfreq, "read_int", lambda p: (il.hit(), real_read(p))[1])
    polls = 0
    while schedule or polls < 3:
        if not schedule:
            polls += 1
        state.tick(None)
        assert il.n < 10_000, "the stand-in's poll never ended"
    monkeypatch.undo()
    return state, node


CASES = [
    ("einval", HIGH, LOW),  # lowering: min first
    ("einval", LOW, HIGH),  # raising: max first
    ("pmqos", HIGH, LOW),
    ("pmqos", LOW, MID),
]


@pytest.mark.slow
@pytest.mark.parametrize("rules,before,after", CASES, ids=[f"{r}-{b}-{a}" for r, b, a in CASES])
def test_a_lock_written_anywhere_in_a_poll_is_taken_whole(tmp_path, monkeypatch, rules, before,
                                                          after):  # fmt: skip
    n_ops = 20  # two or three polls of the stand-in (6 file operations each, 10 when it answers)
    cases = schedules(n_ops)
    assert len(cases) > 100
    for k, at in enumerate(cases):
        state, node = run_case(tmp_path / str(k), rules, before, after, at, monkeypatch)
        got = {a: int((node / a).read_text()) for a in ("min_freq", "max_freq")}
        assert (state.eff_min, state.eff_max) == (after, after), (at, got)
        assert got == {"min_freq": after, "max_freq": after}, at
        assert state.rejected == 0, at  # every step of this pair order is valid on JetPack 4
        if rules == "pmqos":
            assert (state.req_min, state.req_max) == (after, after), at

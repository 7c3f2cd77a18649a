"""How a coordinator waits for its Flower run (``deployment/flwr_cli.py``): `flwr ls` is a new
Python process per call, so a quiet run is asked less and less often, and the run's progress
file brings the next question forward. Verdicts are on the sequence of waits and on whether a
change was seen, never on how long this machine took."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from deployment.flwr_cli import MAX_POLL_S, next_poll_s, wait_for_progress


def test_quiet_polls_back_off_to_the_ceiling_and_a_sign_of_life_resets_them():
    waits, wait = [], 1.0
    for lively in [True] + [False] * 9 + [True, False]:
        wait = next_poll_s(wait, lively, 1.0, MAX_POLL_S)
        waits.append(wait)
    # by hand: 1, then x1.5 per quiet poll (1.5, 2.25, 3.375, 5.0625, 7.59375) up to 10
    assert waits[:7] == [1.0, 1.5, 2.25, 3.375, 5.0625, 7.59375, 10.0]
    assert waits[7:10] == [10.0] * 3
    assert waits[10:] == [1.0, 1.5]
    # a ceiling below the first wait keeps polls at poll_s (no progress file: no back-off)
    assert next_poll_s(1.0, False, 1.0, 1.0) == 1.0


def test_a_rewritten_progress_file_ends_the_wait_early(tmp_path: Path):
    state = tmp_path / "state.json"
    state.write_text("{}")
    done = threading.Event()

    def rewrite() -> None:  # again and again: one rewrite could land before the wait looks
        n = 0
        while not done.wait(0.05):
            n += 1
            tmp = tmp_path / "state.json.tmp"
            tmp.write_text(f'{{"segments": {n}}}')
            os.replace(tmp, state)  # a new inode, as the round's atomic writes do

    writer = threading.Thread(target=rewrite)
    writer.start()
    try:
        assert wait_for_progress(state, 300.0) is True  # seen, long before 300 s
    finally:
        done.set()
        writer.join()


def test_an_unchanged_or_missing_file_waits_the_whole_time(tmp_path: Path):
    state = tmp_path / "state.json"
    state.write_text("{}")
    t0 = time.monotonic()
    assert wait_for_progress(state, 0.6) is False
    assert wait_for_progress(tmp_path / "absent.json", 0.3) is False
    assert wait_for_progress(None, 0.1) is False
    assert time.monotonic() - t0 >= 1.0  # a lower bound: sleeping never ends early

"""How a coordinator waits for its Flower run (``deployment/flwr_cli.py``): `flwr ls` is a new
Python process per call, so a quiet run is asked less and less often, and the run's progress
file brings the next question forward. Verdicts are on the sequence of waits and on whether a
change was seen, never on how long this machine took."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from deployment.flwr_cli import MAX_POLL_S, next_poll_s, says_ended, wait_for_end, wait_for_progress


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


def rewriting(state: Path, texts: list[str]) -> tuple[threading.Event, threading.Thread]:
    """A thread that rewrites ``state`` with each text in turn every 50 ms (the last one
    again and again, until told to stop), atomically as the round does."""
    done = threading.Event()

    def rewrite() -> None:
        n = 0
        while not done.wait(0.05):
            tmp = state.with_suffix(".tmp")
            tmp.write_text(texts[min(n, len(texts) - 1)])
            os.replace(tmp, state)
            n += 1

    thread = threading.Thread(target=rewrite)
    thread.start()
    return done, thread


def test_replies_mid_round_do_not_end_the_wait_the_round_s_end_does(tmp_path: Path):
    """`flwr ls` is asked again at once only when the state file says the round ended: a
    reply mid-round rewrites the file too, and that alone asks Flower nothing."""
    state = tmp_path / "state.json"
    state.write_text('{"finished": false}')
    done, thread = rewriting(state, ['{"finished": false, "segments": 1}'])
    t0 = time.monotonic()
    try:
        assert wait_for_end(state, 0.6) is False  # rewritten a dozen times, still waited
    finally:
        done.set()
        thread.join()
    assert time.monotonic() - t0 >= 0.6  # a lower bound: the whole wait
    done, thread = rewriting(state, ['{"finished": false}'] * 3 + ['{"finished": true}'])
    try:
        assert wait_for_end(state, 300.0) is True  # the end, long before 300 s
    finally:
        done.set()
        thread.join()
    assert says_ended(state)


def test_what_says_a_round_ended(tmp_path: Path):
    state = tmp_path / "state.json"
    for text, ended in [
        ('{"finished": true}', True),
        ('{"finished": false, "interrupted": {"why": "SIGTERM"}}', True),
        ('{"finished": false}', False),
        ('{"finished": tr', False),  # half-written: not yet
        ("[1, 2]", False),
    ]:
        state.write_text(text)
        assert says_ended(state) is ended, text
    assert says_ended(tmp_path / "absent.json") is False and says_ended(None) is False

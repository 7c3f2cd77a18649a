"""The book's progress is parsed once per object it holds (``fleet.rounds.progress``)."""

from __future__ import annotations

import pytest

from fleet.common.errors import InputError
from fleet.planning import round_logic as logic
from fleet.rounds.progress import Progress, entry_progress


def test_the_same_object_is_parsed_once_and_another_object_is_checked_again():
    raw = Progress(time_s=60.0, samples=640.0, segments=1).to_dict()
    first = entry_progress("memo-a", raw)
    assert entry_progress("memo-a", raw) is first  # the very object: no second parse
    other = dict(raw, samples=1280.0)
    assert entry_progress("memo-a", other).samples == 1280.0  # a new object: parsed
    with pytest.raises(InputError, match="samples"):
        entry_progress("memo-a", dict(raw, samples=-5.0))  # and checked: refused in one line
    assert entry_progress("memo-b", raw) is not first  # another device: its own memo


def test_a_segment_folded_into_the_book_is_read_back_as_its_own_record():
    e = logic.device_entry("memo-c")
    prog = Progress(time_s=600.0, samples=6000.0, segments=1, end_batch_size=32)
    logic.apply_segment(e, {"segments": [], "device_type": "jetson-nano"}, prog)
    assert logic.progress(e) is prog  # remembered, not parsed again
    e["progress"] = dict(e["progress"], samples=7000.0)  # the book replaces it whole
    assert logic.progress(e).samples == 7000.0
    assert logic.progress(e).to_dict() == e["progress"]

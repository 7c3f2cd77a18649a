"""A board's drift-refreshed table reaches the device's profile file, and so the store.

The closed loop refreshes only the rows it was shipped (the round's batch sizes); the device's
own file keeps everything else. ``merge_refreshed`` puts the two together; ``run_on_agent`` then
sees the file changed and returns it to the coordinator (``profile-csv`` in the reply).
"""

from __future__ import annotations

from clients.board_profile import merge_refreshed
from fleet.core.profile import load_profile
from fleet.method.profile_io import read_rows, write_rows


def _row(b: int, f: float, t: float, peak: float, source: str = "measured") -> dict:
    return {
        "batch_size": b,
        "freq_mhz": f,
        "time_per_batch_s": t,
        "peak_power_w": peak,
        "mean_power_w": round(peak * 0.9, 6),
        "source": source,
    }


def test_refreshed_rows_replace_theirs_and_the_rest_of_the_file_stays(tmp_path):
    path = tmp_path / "nano.csv"
    original = [_row(b, f, 0.1 * b / f * 100, 2.0 + b * f / 1000.0) for b in (8, 16, 128)
                for f in (300.0, 600.0)]  # fmt: skip
    write_rows(str(path), original, ["device=jetson-nano", "model=resnet18"])

    # The board refreshed batch sizes 8 and 16 only (batch 128 was not shipped this round):
    # (16, 600) drifted +10 % power and was measured; the rest carried, marked predicted.
    refreshed = tmp_path / "board.csv"
    board_rows = []
    for r in original:
        if r["batch_size"] == 128:
            continue
        k = 1.10
        src = "measured" if (r["batch_size"], r["freq_mhz"]) == (16, 600.0) else "predicted"
        board_rows.append(_row(r["batch_size"], r["freq_mhz"], r["time_per_batch_s"],
                               round(r["peak_power_w"] * k, 6), src))  # fmt: skip
    write_rows(str(refreshed), board_rows, ["refreshed reason=drift events=1"])

    merge_refreshed(str(path), refreshed.read_text())

    header, rows, comments = read_rows(str(path))
    got = {(int(r["batch_size"]), float(r["freq_mhz"])): r for _n, r in rows}
    assert len(got) == 6  # nothing lost, nothing doubled
    for r in original:
        key = (r["batch_size"], r["freq_mhz"])
        scale = 1.0 if r["batch_size"] == 128 else 1.10  # batch 128 was not refreshed
        assert float(got[key]["peak_power_w"]) == round(r["peak_power_w"] * scale, 6)
    assert got[(16, 600.0)]["source"] == "measured"
    assert got[(8, 300.0)]["source"] == "predicted"
    assert got[(128, 600.0)]["source"] == "measured"  # untouched row of the device's file
    assert comments[:2] == ["device=jetson-nano", "model=resnet18"]  # the header stays
    assert "refreshed reason=drift events=1" in comments  # and says what happened
    assert len(load_profile(str(path)).points) == 6  # still a valid profile

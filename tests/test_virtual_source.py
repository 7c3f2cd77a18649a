"""A virtual board says it is one: profiles, runs and doctor carry ``source=virtual`` and the host.

Why: a virtual board's times are the host CPU's, not the board's; a profile that says
``source=measured`` and ``board=NVIDIA Jetson Nano Developer Kit`` would pass for a real board's
in the coordinator's store. The agent learns it from the tree itself (the marker the virtual
board's builder writes, ``board_identity.VIRTUAL_MARKER``), never from a flag a user can forget.
"""

import json
import socket

import pytest

from fleet.agent.devices.board_identity import VIRTUAL_MARKER, measurement_origin, run_origin
from fleet.agent.measure.drift import refresh_comments, refresh_rows
from fleet.method.profile_io import read_rows
from fleet.trust import store
from fleet.trust.verify import probed
from simulations.virtual_jetson import build_board
from tests.conftest import run_cli


def test_the_builder_marks_the_tree_and_a_tree_without_the_marker_is_a_real_board(tmp_path):
    board = build_board(tmp_path / "b", "jetson-orin-nano", workload="small_cnn")
    marker = board.root / VIRTUAL_MARKER
    assert json.loads(marker.read_text())["board"] == "jetson-orin-nano"
    origin = measurement_origin(str(board.root))
    assert origin["source"] == "virtual" and origin["virtual_board"] == "jetson-orin-nano"
    assert origin["host"].startswith(socket.gethostname())
    marker.unlink()  # the same tree without the marker: a copied real board's tree
    assert measurement_origin(str(board.root)) == {"source": "measured"}


def test_doctor_says_virtual_and_the_host(tmp_path):
    board = build_board(tmp_path / "b", "nano", workload="small_cnn")
    r = run_cli("doctor", "--sysfs-root", str(board.root), "--json")
    assert r.returncode == 0, r.stderr
    b = json.loads(r.stdout)["board"]
    assert (b["source"], b["virtual_board"]) == ("virtual", "nano")
    assert b["host"].startswith(socket.gethostname())
    text = run_cli("doctor", "--sysfs-root", str(board.root)).stdout
    assert "virtual board (nano) on host " + socket.gethostname() in text


@pytest.mark.slow
def test_a_profile_on_a_virtual_board_says_virtual_on_every_row_and_in_its_header(tmp_path):
    board = build_board(tmp_path / "b", "nano", workload="small_cnn")
    out = tmp_path / "p.csv"
    with board.kernel(process=True, load=2):
        r = run_cli(
            "profile", "--backend", "jetson", "--sysfs-root", str(board.root),
            "--state-dir", str(tmp_path / "state"), "--model", "small_cnn",
            "--input-shape", "3x16x16", "--batch-sizes", "2", "--freqs", "76.8,921.6",
            "--steps", "1", "--warmup", "0", "--out", str(out), "--json",
        )  # fmt: skip
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["source"] == "virtual" and summary["host"].startswith(socket.gethostname())
    _header, rows, comments = read_rows(str(out))
    assert [row["source"] for _line, row in rows] == ["virtual", "virtual"]
    meta = dict(c.split("=", 1) for c in comments if "=" in c)
    assert meta["source"] == "virtual" and meta["virtual_board"] == "nano"
    assert meta["host"].startswith(socket.gethostname())
    # the coordinator's store keeps it virtual (not "measured")
    prov = store.provenance_from_comments(comments, "jetson-nano")
    assert prov.source == "virtual"


def _stored(root, device, source, probes):
    rows = [{"batch_size": 2, "freq_mhz": 76.8, "time_per_batch_s": 0.1, "peak_power_w": 2.0}]
    prov = store.Provenance("jetson-nano", source, probes=probes)
    store.put(root, device, store.Workload("small_cnn", "3x16x16"), rows, prov)


def test_a_measured_sibling_beats_a_virtual_one_even_with_fewer_probes(tmp_path):
    _stored(tmp_path, "vnano", "virtual", 24)
    _stored(tmp_path, "nano1", "measured", 3)
    found = store.sibling(tmp_path, "jetson-nano", store.Workload("small_cnn", "3x16x16"))
    assert found.device == "nano1"


def test_a_probe_or_a_drift_refresh_on_a_virtual_board_stays_virtual():
    assert probed({"batch_size": 2, "source": "virtual"})["source"] == "virtual"
    assert probed({"batch_size": 2})["source"] == "measured"
    rows = [
        {"batch_size": 2, "freq_mhz": f, "time_per_batch_s": 0.1 * 900 / f, "peak_power_w": 2.0,
         "mean_power_w": 1.9, "status": "ok", "source": "virtual"}
        for f in (76.8, 460.8, 921.6)
    ]  # fmt: skip
    event = {
        "batch_size": 2, "freq_mhz": 460.8, "measured_time_s": 0.3, "expected_time_s": 0.195,
        "measured_peak_w": 2.0, "expected_peak_w": 2.0, "kind": "time", "t_s": 1.0,
    }  # fmt: skip
    new = refresh_rows(rows, [event])
    by_f = {r["freq_mhz"]: r["source"] for r in new}
    assert by_f[460.8] == "virtual"  # the re-measured point: the host's time again
    assert "source=virtual" in refresh_comments(["source=virtual"], [event])
    assert "source=refreshed" in refresh_comments(["source=measured"], [event])


def test_a_runs_origin_follows_its_backend():
    assert run_origin("replay", {"source": "virtual"}) == {"source": "replayed"}
    assert run_origin("cpu", {"backend": "cpu"}) == {"source": "measured"}
    desc = {"source": "virtual", "host": "h (cpu)", "virtual_board": "nano", "l4t": ""}
    assert run_origin("jetson", desc) == {
        "source": "virtual", "host": "h (cpu)", "virtual_board": "nano"
    }  # fmt: skip

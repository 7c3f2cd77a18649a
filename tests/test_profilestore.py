"""The coordinator's profile store and `powerfleet profiles` (issue 11)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleet.common.errors import InputError
from fleet.core.efficiency import Efficiency
from fleet.method.profile_io import read_rows
from fleet.trust.store import (
    Provenance,
    Workload,
    adopt_sibling,
    get,
    list_store,
    profile_path,
    provenance_from_comments,
    put,
    sibling,
    store_from_fleet,
)
from fleet.trust.verify import profile_from_rows, select_verified

REPO = Path(__file__).resolve().parents[1]
NANO = REPO / "simulations" / "profiles" / "nano_resnet18.csv"

AGENT_CSV = """\
# powerfleet profile
# backend=jetson
# date=2026-11-20T10:00:00Z
# source=measured
# plan=predict
# probes=4
# l4t=R32.7.4
# serial=1421019012345
batch_size,freq_mhz,time_per_batch_s,peak_power_w,mean_power_w,model,input_shape,source
8,76.8,0.9,2.1,1.9,resnet18,3x32x32,measured
8,921.6,0.12,4.4,3.9,resnet18,3x32x32,measured
16,76.8,1.7,2.3,2.0,resnet18,3x32x32,measured
16,460.8,0.41,3.7,3.2,resnet18,3x32x32,predicted
16,921.6,0.21,5.6,4.8,resnet18,3x32x32,measured
"""

WL = Workload.of("resnet18", (3, 32, 32))


def test_round_trip_with_provenance(tmp_path):
    header, numbered, comments = read_rows(_write(tmp_path / "in.csv", AGENT_CSV))
    prov = provenance_from_comments(comments, "jetson-nano")
    assert prov == Provenance(
        "jetson-nano", "predicted", "2026-11-20T10:00:00Z", 4, "R32.7.4", "1421019012345"
    )
    stored = put(tmp_path / "store", "nano-01", WL, AGENT_CSV, prov)
    assert stored.path == tmp_path / "store" / "nano-01" / "resnet18@3x32x32.csv"
    back = get(tmp_path / "store", "nano-01", WL)
    assert back is not None
    assert back.device == "nano-01" and back.workload == WL
    assert back.provenance == prov
    assert back.rows == [row for _n, row in numbered]  # every cell as the device wrote it
    assert back.comments == comments  # the profile's own header lines are kept
    # the file is an ordinary profile: provenance lines on top, then the agent's, then rows
    text = stored.path.read_text()
    assert text.startswith("# store.device=nano-01\n# store.model=resnet18\n")
    assert "# store.serial=1421019012345\n# powerfleet profile\n" in text
    # storing what was read back gives the same bytes (one codec, stable)
    put(tmp_path / "store2", "nano-01", WL, back.rows, back.provenance, back.comments)
    again = get(tmp_path / "store2", "nano-01", WL)
    assert again is not None and again.rows == back.rows and again.provenance == prov
    assert again.path.read_bytes() == stored.path.read_bytes()
    # no temp files left behind by the atomic writes
    assert sorted(os.listdir(stored.path.parent)) == ["resnet18@3x32x32.csv"]


def test_defaults_date_and_probes_and_absent_profile(tmp_path):
    store = tmp_path / "s"
    assert get(store, "nano-01", WL) is None
    assert list_store(store) == []
    stored = put(store, "nano-01", WL, AGENT_CSV, Provenance("jetson-nano"))
    assert stored.provenance.probes == 4  # rows not marked predicted
    assert stored.provenance.date.endswith("Z") and stored.provenance.date[:2] == "20"


def test_sibling_by_type_prefers_measured(tmp_path):
    store = tmp_path / "s"
    text = NANO.read_text()
    put(store, "nano-01", WL, text, Provenance("jetson-nano", "predicted", "2026-11-22", 18))
    put(store, "nano-02", WL, text, Provenance("jetson-nano", "measured", "2026-11-01", 72))
    put(store, "tx2-01", WL, text, Provenance("jetson-tx2nx", "measured", "2026-11-21", 72))
    other = Workload.of("mobilenetv2", "3x32x32")
    put(store, "nano-03", other, text.replace("resnet18", "mobilenetv2"), Provenance("jetson-nano"))
    found = sibling(store, "jetson-nano", WL, exclude="nano-09")
    assert found is not None and found.device == "nano-02"
    assert sibling(store, "jetson-nano", WL, exclude="nano-02").device == "nano-01"
    assert sibling(store, "jetson-orin", WL) is None
    assert sibling(store, "jetson-tx2nx", other) is None
    # the new board starts from the sibling's table, marked as such
    new = put(
        store,
        "nano-09",
        WL,
        found.rows,
        Provenance("jetson-nano", "sibling", extra={"sibling_of": found.device}),
    )
    assert get(store, "nano-09", WL).provenance.extra == {"sibling_of": "nano-02"}
    assert len(new.rows) == len(found.rows)
    assert [s.device for s in list_store(store)] == [
        "nano-01", "nano-02", "nano-03", "nano-09", "tx2-01",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "device,model,shape",
    [
        ("../etc", "resnet18", "3x32x32"),
        ("nano/01", "resnet18", "3x32x32"),
        ("nano-01", "..", "3x32x32"),
        ("nano-01", "resnet18", "3x32/32"),
        ("", "resnet18", "3x32x32"),
        (".hidden", "resnet18", "3x32x32"),
        ("a..b", "resnet18", "3x32x32"),
    ],
)
def test_unsafe_names_are_refused(tmp_path, device, model, shape):
    with pytest.raises(InputError) as err:
        put(tmp_path, device, Workload(model, shape), AGENT_CSV, Provenance("jetson-nano"))
    msg = str(err.value)
    assert "\n" not in msg and "not a safe name" in msg
    assert not any(tmp_path.iterdir())  # nothing written anywhere


def test_bad_input_is_one_line_and_writes_nothing(tmp_path):
    with pytest.raises(InputError, match="missing column"):
        put(tmp_path, "nano-01", WL, "batch_size,freq_mhz\n8,76.8\n", Provenance("jetson-nano"))
    with pytest.raises(InputError, match="source='guessed'"):
        put(tmp_path, "nano-01", WL, AGENT_CSV, Provenance("jetson-nano", "guessed"))
    with pytest.raises(InputError, match="model column says resnet18"):
        put(tmp_path, "nano-01", Workload("mobilenetv2", "3x32x32"), AGENT_CSV,
            Provenance("jetson-nano"))  # fmt: skip
    with pytest.raises(InputError, match="one line"):
        put(tmp_path, "nano-01", WL, AGENT_CSV, Provenance("jetson-nano", serial="a\nb"))
    assert not profile_path(tmp_path, "nano-01", WL).exists()


def test_store_from_fleet_reads_only_the_run_table(tmp_path):
    fleet = tmp_path / "f.toml"
    fleet.write_text('[run]\nprofile_store = "store"\n[[devices]]\nname = "x"\n')
    assert store_from_fleet(fleet) == (tmp_path / "store").resolve()
    fleet.write_text("[run]\nname = 'n'\n")
    assert store_from_fleet(fleet) is None


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "fleet", "profiles", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_cli_lists_the_store(tmp_path):
    store = tmp_path / "store"
    put(store, "nano-01", WL, AGENT_CSV, provenance_from_comments([], "jetson-nano", probes=4))
    put(store, "tx2-01", WL, NANO.read_text(),
        Provenance("jetson-tx2nx", "refreshed", "2026-11-22T01:02:03Z", 72))  # fmt: skip
    res = _cli(str(store), "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["store"] == str(store)
    got = {p["device"]: p for p in out["profiles"]}
    assert set(got) == {"nano-01", "tx2-01"}
    assert got["nano-01"]["type"] == "jetson-nano"
    assert got["nano-01"]["rows"] == 5 and got["nano-01"]["predicted_rows"] == 1
    assert got["nano-01"]["probes"] == 4
    assert got["tx2-01"]["source"] == "refreshed"
    assert got["tx2-01"]["date"] == "2026-11-22T01:02:03Z"
    assert got["tx2-01"]["model"] == "resnet18" and got["tx2-01"]["input_shape"] == "3x32x32"
    assert Path(got["tx2-01"]["path"]) == store / "tx2-01" / "resnet18@3x32x32.csv"
    # human table names the devices; a store given by the fleet's [run] profile_store works
    fleet = tmp_path / "fleet.toml"
    fleet.write_text('[run]\nprofile_store = "store"\n')
    res = _cli("--fleet", str(fleet))
    assert res.returncode == 0, res.stderr
    assert "nano-01" in res.stdout and "tx2-01" in res.stdout and "refreshed" in res.stdout
    # a file where the store should be: one line, exit 2
    bad = tmp_path / "file"
    bad.write_text("x")
    res = _cli(str(bad), "--json")
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "not a directory" in res.stderr


def test_adopted_sibling_is_verified_with_a_few_probes(tmp_path):
    """A new Nano starts from nano-02's table; its own board draws 12 % more power. The choice
    is probed, found over budget, corrected, and the final choice fits on the new board."""
    store = tmp_path / "s"
    put(store, "nano-02", WL, NANO.read_text(), Provenance("jetson-nano", "measured"))
    assert adopt_sibling(store, "nano-02", "jetson-orin", WL) is None
    start = adopt_sibling(store, "nano-09", "jetson-nano", WL)
    assert start is not None
    assert start.provenance.source == "sibling" and start.provenance.probes == 0
    assert start.provenance.extra == {"sibling_of": "nano-02"}
    assert {r["source"] for r in start.rows} == {"predicted"}
    assert start.comments == get(store, "nano-02", WL).comments  # how it was measured, kept
    assert start.comments[0].startswith("MODELED reference profile")
    truth = {}
    for r in get(store, "nano-02", WL).rows:
        row = dict(r, source="measured")
        row["peak_power_w"] = 1.12 * float(r["peak_power_w"])
        row["mean_power_w"] = 1.12 * float(r["mean_power_w"])
        truth[(int(r["batch_size"]), float(r["freq_mhz"]))] = row
    probed = []

    def measure(b, f):
        probed.append((b, f))
        return truth[(b, f)]

    eff = Efficiency({b: 1000.0 * b**0.5 for b in sorted({k[0] for k in truth})})
    budget = 5.0
    result = select_verified(start.rows, eff, budget, measure)
    chosen = truth[(result.choice.batch_size, result.choice.freq_mhz)]
    assert chosen["peak_power_w"] <= budget  # fits on the new board, by its own measurement
    assert 1 <= len(probed) <= 3  # a few probes (2 here), not a profile of 72 points
    assert result.corrections[0].reason.startswith("over budget")
    best = min(
        (float(r["time_per_batch_s"]) / b * eff.samples[b], k)
        for k, r in truth.items()
        for b in [k[0]]
        if r["peak_power_w"] <= budget
    )
    b_chosen = int(chosen["batch_size"])
    got = float(chosen["time_per_batch_s"]) / b_chosen * eff.samples[b_chosen]
    assert got == pytest.approx(best[0])  # the best the new board can do under the budget
    assert profile_from_rows(result.rows).point(result.choice.batch_size, result.choice.freq_mhz)


def test_first_contact_then_reuse_then_sibling(tmp_path):
    """Round 1: nothing stored -> the board profiles in predict mode (the real agent profiler
    on a replay backend) and returns its CSV; the coordinator stores it. Round 2: the board
    gets its own profile back. A second board of the type starts from a sibling copy."""
    from fleet.agent.devices.replay import ReplayBackend
    from fleet.agent.measure.profile_writer import write_profile
    from fleet.agent.prediction.design import design_probes
    from fleet.trust.store import put_from_device, starting_profile
    from tests.hardware_helpers import sweep

    store = tmp_path / "store"
    assert starting_profile(store, "nano-01", "jetson-nano", WL) == ("profile", None)
    # the device side: profile in predict mode, write the CSV, send its text back
    backend = ReplayBackend(str(NANO))
    batches = [4, 16, 64]
    result = sweep(backend, "resnet18", (3, 32, 32), batches, predict=True)
    device_csv = tmp_path / "device" / "nano-01_resnet18.csv"
    write_profile(str(device_csv), result.rows, result.metadata)
    stored = put_from_device(
        store, "nano-01", "jetson-nano", WL, device_csv.read_text(), l4t="R32.7.4"
    )
    freqs = sorted({float(r["freq_mhz"]) for r in result.rows})
    assert stored.provenance.source == "predicted"
    assert stored.provenance.probes == result.probes == len(design_probes(batches, freqs))
    assert stored.provenance.l4t == "R32.7.4"
    assert len(stored.rows) == len(batches) * len(freqs) == 36
    # round 2: shipped back as it was stored, nothing to profile
    how, again = starting_profile(store, "nano-01", "jetson-nano", WL)
    assert how == "stored" and again.rows == stored.rows
    assert again.provenance == stored.provenance
    # a second Nano starts from the first one's table, unverified
    how, copy = starting_profile(store, "nano-02", "jetson-nano", WL)
    assert how == "sibling" and copy.provenance.extra == {"sibling_of": "nano-01"}
    assert {r["source"] for r in copy.rows} == {"predicted"}
    assert starting_profile(store, "tx2-01", "jetson-tx2nx", WL) == ("profile", None)

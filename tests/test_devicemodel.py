"""The modeled reference profiles and efficiency files: schema, calibration, determinism.

The calibration checks read the committed CSVs with the csv module and brute-force the paper's
published points on them, so they test what the simulation will actually replay, not the model's
internals. Only the determinism check calls the generator.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from simulations.devicemodel import fitted, generate
from simulations.devicemodel.files import MODEL_VERSION
from simulations.devicemodel.profiles import write_profile

SIM = Path(__file__).resolve().parents[1] / "simulations"
PROFILES = SIM / "profiles"
EFFICIENCY = SIM / "efficiency"

PROFILE_COLUMNS = [
    "batch_size",
    "freq_mhz",
    "time_per_batch_s",
    "peak_power_w",
    "mean_power_w",
    "device",
    "model",
    "input_shape",
    "samples",
    "source",
    "idle_power_w",
]
EFFICIENCY_COLUMNS = [
    "batch_size",
    "samples_to_accuracy",
    "std",
    "runs",
    "model",
    "dataset",
    "target_accuracy",
    "source",
]
NANO_FREQS = [76.8, 153.6, 230.4, 307.2, 384.0, 460.8, 537.6, 614.4, 691.2, 768.0, 844.8, 921.6]
TX2NX_FREQS = [
    114.75,
    216.75,
    318.75,
    420.75,
    522.75,
    624.75,
    726.75,
    828.75,
    930.75,
    1032.75,
    1134.75,
    1236.75,
    1300.5,
]
DEVICES = {"nano": ("jetson-nano", NANO_FREQS), "tx2nx": ("jetson-tx2nx", TX2NX_FREQS)}
MODELS = {
    "resnet18": ("3x32x32", [4, 8, 16, 32, 64, 128]),
    "mobilenetv2": ("3x32x32", [4, 8, 16, 32, 64]),
    "transformer": ("64", [4, 8, 16, 32, 64, 128]),
    "small_cnn": ("1x28x28", [4, 8, 16, 32, 64, 128]),
}
EFFICIENCY_FILES = {
    "resnet18": ["cifar10-proxy", "svhn", "cinic"],
    "mobilenetv2": ["cifar10-proxy", "svhn", "cinic"],
    "transformer": ["shakespeare-proxy", "austen", "dickens"],
}


def read_csv(path: Path) -> tuple[list[str], list[str], list[dict[str, str]]]:
    """(comment lines, header, rows) of a CSV with leading ``#`` comment lines."""
    lines = path.read_text().splitlines()
    comments = [line for line in lines if line.startswith("#")]
    body = [line for line in lines if line.strip() and not line.startswith("#")]
    reader = csv.DictReader(body)
    rows = list(reader)
    return comments, list(reader.fieldnames or []), rows


def load_profile(device: str, model: str) -> dict[tuple[int, float], dict[str, float]]:
    """{(batch, freq): {"t": s/step, "peak": W, "mean": W}} from a committed profile file."""
    _, _, rows = read_csv(PROFILES / f"{device}_{model}.csv")
    out = {}
    for r in rows:
        key = (int(r["batch_size"]), float(r["freq_mhz"]))
        out[key] = {
            "t": float(r["time_per_batch_s"]),
            "peak": float(r["peak_power_w"]),
            "mean": float(r["mean_power_w"]),
        }
    return out


def top_freq(profile, batch: int, budget: float | None) -> float | None:
    """Eq. 4 by brute force: the highest frequency whose peak fits the budget for ``batch``."""
    ok = [
        f for (b, f), p in profile.items() if b == batch and (budget is None or p["peak"] <= budget)
    ]
    return max(ok) if ok else None


def per_sample(profile, batch: int, freq: float) -> float:
    return profile[(batch, freq)]["t"] / batch


def safe_cap(profiles, budget: float | None) -> float:
    """Highest frequency at which every batch of every profile fits the budget."""
    freqs = sorted({f for p in profiles for (_, f) in p})
    best = None
    for f in freqs:
        peaks = [v["peak"] for p in profiles for (_, g), v in p.items() if g == f]
        if budget is None or max(peaks) <= budget:
            best = f
        else:
            break
    assert best is not None
    return best


@pytest.fixture(scope="module")
def nano_r18():
    return load_profile("nano", "resnet18")


# ------------------------------------------------------------------------------------------
# schema
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", sorted(DEVICES))
@pytest.mark.parametrize("model", sorted(MODELS))
def test_profile_schema_and_rows(device, model):
    comments, header, rows = read_csv(PROFILES / f"{device}_{model}.csv")
    assert header == PROFILE_COLUMNS
    text = " ".join(comments).lower()
    assert "modeled" in text and "not measured" in text
    assert MODEL_VERSION in " ".join(comments)
    assert "python -m simulations.devicemodel --out simulations/profiles" in " ".join(comments)
    dev_name, freqs = DEVICES[device]
    shape, batches = MODELS[model]
    seen = set()
    for r in rows:
        assert set(r) == set(PROFILE_COLUMNS) and None not in r.values()
        b = int(r["batch_size"])
        f = float(r["freq_mhz"])
        t, peak, mean = (float(r[c]) for c in ("time_per_batch_s", "peak_power_w", "mean_power_w"))
        assert b > 0 and f > 0 and int(r["samples"]) > 0
        for v in (t, peak, mean):
            assert math.isfinite(v) and v > 0
        assert peak > mean, "peak is the highest sample, the mean cannot exceed it"
        assert r["device"] == dev_name and r["model"] == model and r["input_shape"] == shape
        assert r["source"] == "modeled"
        assert float(r["idle_power_w"]) == fitted.DEVICES[device].idle_w
        assert (b, f) not in seen
        seen.add((b, f))
    assert seen == {(b, f) for b in batches for f in freqs}, "full batch x frequency grid"


@pytest.mark.parametrize("device", sorted(DEVICES))
@pytest.mark.parametrize("model", sorted(MODELS))
def test_profile_monotone(device, model):
    """Power rises and step time falls with the clock; power rises with the batch (§4.1)."""
    prof = load_profile(device, model)
    _, freqs = DEVICES[device]
    _, batches = MODELS[model]
    for b in batches:
        peaks = [prof[(b, f)]["peak"] for f in freqs]
        means = [prof[(b, f)]["mean"] for f in freqs]
        times = [prof[(b, f)]["t"] for f in freqs]
        assert peaks == sorted(peaks) and len(set(peaks)) == len(peaks)
        assert means == sorted(means)
        assert times == sorted(times, reverse=True)
    for f in freqs:
        peaks = [prof[(b, f)]["peak"] for b in batches]
        assert peaks == sorted(peaks)


# ------------------------------------------------------------------------------------------
# calibration (a)-(c) on the Nano files
# ------------------------------------------------------------------------------------------


def test_fig1_five_watts(nano_r18):
    """(a) b=128 tops out at 307.2 MHz, b=64 at 460.8 MHz, and b=64 saves ~31.9 % of the time."""
    assert nano_r18[(128, 307.2)]["peak"] <= 5.0 < nano_r18[(128, 384.0)]["peak"]
    assert nano_r18[(64, 460.8)]["peak"] <= 5.0 < nano_r18[(64, 537.6)]["peak"]
    assert top_freq(nano_r18, 128, 5.0) == 307.2
    assert top_freq(nano_r18, 64, 5.0) == 460.8
    saving = 1 - per_sample(nano_r18, 64, 460.8) / per_sample(nano_r18, 128, 307.2)
    assert abs(saving - 0.319) <= 0.02


def test_baseline_caps():
    """(b) the caps safe for every Nano model and batch are 307.2 / 614.4 / 921.6 MHz."""
    profiles = [load_profile("nano", m) for m in MODELS]
    assert safe_cap(profiles, 4.5) == 307.2
    assert safe_cap(profiles, 7.0) == 614.4
    assert safe_cap(profiles, None) == 921.6
    for p in profiles:  # every batch of every model fits at the cap ...
        assert all(v["peak"] <= 4.5 for (_, f), v in p.items() if f == 307.2)
        assert all(v["peak"] <= 7.0 for (_, f), v in p.items() if f == 614.4)
    # ... and one step higher something does not
    assert any(v["peak"] > 4.5 for p in profiles for (_, f), v in p.items() if f == 384.0)
    assert any(v["peak"] > 7.0 for p in profiles for (_, f), v in p.items() if f == 691.2)


@pytest.mark.parametrize("budget", [4.5, 5.0, 7.0])
def test_fig2(nano_r18, budget):
    """(c) b=8 runs faster clocks, b=32 is faster per sample, and with N(8)=10, N(32)=15 the
    time-to-accuracy winner is b=8 at 4.5 W and 5 W but b=32 at 7 W."""
    f8, f32 = top_freq(nano_r18, 8, budget), top_freq(nano_r18, 32, budget)
    assert f8 is not None and f32 is not None
    assert f8 > f32
    t8, t32 = per_sample(nano_r18, 8, f8), per_sample(nano_r18, 32, f32)
    assert t32 < t8
    tt8, tt32 = t8 * 10, t32 * 15
    if budget < 7.0:  # the fit holds Fig. 2 as a hinge (calibrate/objective.py, FIT_FIGURES)
        assert tt8 < tt32
    else:
        assert tt32 < tt8


def test_no_peak_on_a_calibration_budget(nano_r18):
    """'<' and '<=' feasibility give the same answers at the calibration budgets."""
    for v in nano_r18.values():
        for budget in (4.5, 5.0, 7.0):
            assert abs(v["peak"] - budget) >= 0.005


# ------------------------------------------------------------------------------------------
# (d) scale and cross-device / cross-model relations
# ------------------------------------------------------------------------------------------


def test_absolute_scale(nano_r18):
    assert 0.02 <= per_sample(nano_r18, 128, 921.6) <= 0.05
    tx2 = load_profile("tx2nx", "resnet18")
    assert 10.0 <= tx2[(128, 1300.5)]["peak"] <= 12.0
    assert nano_r18[(128, 921.6)]["peak"] < tx2[(128, 1300.5)]["peak"]


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("budget", [4.5, 7.0, None])
def test_tx2nx_faster_than_nano_under_same_budget(model, budget):
    """Paper Table 4 vs Table 2: the TX2 NX trains ~1.5-2.5x faster under the same budget."""
    nano, tx2 = load_profile("nano", model), load_profile("tx2nx", model)

    def best(profile):
        times = []
        for b in MODELS[model][1]:
            f = top_freq(profile, b, budget)
            if f is not None:
                times.append(per_sample(profile, b, f))
        return min(times)

    assert 1.5 <= best(nano) / best(tx2) <= 2.5


@pytest.mark.parametrize("device", sorted(DEVICES))
def test_small_cnn_below_resnet18(device):
    """small_cnn draws less peak (and mean) power than ResNet18 at every shared (b, f), so adding
    it to the fleet cannot move the baselines' "safe for every model" caps."""
    r18 = load_profile(device, "resnet18")
    small = load_profile(device, "small_cnn")
    shared = set(small) & set(r18)
    assert shared == set(small), "small_cnn's grid is a subset of ResNet18's"
    for key in shared:
        assert small[key]["peak"] < r18[key]["peak"], key
        assert small[key]["mean"] < r18[key]["mean"], key


@pytest.mark.parametrize("device", sorted(DEVICES))
def test_small_cnn_is_launch_bound(device):
    """A tiny net: far less time per sample than ResNet18, and per-sample time keeps falling up
    to the largest batch because the fixed per-step host cost dominates small batches."""
    r18 = load_profile(device, "resnet18")
    small = load_profile(device, "small_cnn")
    f = DEVICES[device][1][-1]
    batches = MODELS["small_cnn"][1]
    per = [per_sample(small, b, f) for b in batches]
    assert per == sorted(per, reverse=True) and len(set(per)) == len(per)
    assert per[0] / per[-1] > 4, "b=4 pays mostly for host overhead"
    for b in batches:
        assert per_sample(small, b, f) * 20 < per_sample(r18, b, f)


def test_no_small_cnn_efficiency_file():
    """small_cnn's samples-to-accuracy come from real training, never from the device model."""
    assert not list(EFFICIENCY.glob("small_cnn_*.csv"))
    assert all(model != "small_cnn" for model, _ in fitted.EFFICIENCY_CURVES)


@pytest.mark.parametrize("device", sorted(DEVICES))
def test_model_power_order(device):
    """MobileNetV2 draws less peak power than the transformer, which draws less than ResNet18."""
    r18 = load_profile(device, "resnet18")
    mnv2 = load_profile(device, "mobilenetv2")
    trf = load_profile(device, "transformer")
    for key, v in mnv2.items():
        assert v["peak"] < trf[key]["peak"] < r18[key]["peak"]


# ------------------------------------------------------------------------------------------
# efficiency files
# ------------------------------------------------------------------------------------------


def load_efficiency(model: str, dataset: str) -> dict[int, float]:
    _, _, rows = read_csv(EFFICIENCY / f"{model}_{dataset}.csv")
    return {int(r["batch_size"]): float(r["samples_to_accuracy"]) for r in rows}


@pytest.mark.parametrize(
    ("model", "dataset"), [(m, d) for m, ds in EFFICIENCY_FILES.items() for d in ds]
)
def test_efficiency_schema(model, dataset):
    comments, header, rows = read_csv(EFFICIENCY / f"{model}_{dataset}.csv")
    assert header == EFFICIENCY_COLUMNS
    assert "modeled" in " ".join(comments).lower()
    assert [int(r["batch_size"]) for r in rows] == MODELS[model][1]
    for r in rows:
        assert float(r["samples_to_accuracy"]) > 0
        assert float(r["std"]) >= 0 and int(r["runs"]) > 0
        assert 0 < float(r["target_accuracy"]) < 1
        assert r["model"] == model and r["dataset"] == dataset and r["source"] == "modeled"


def test_efficiency_shapes():
    proxy = load_efficiency("resnet18", "cifar10-proxy")
    for ds in EFFICIENCY_FILES["resnet18"]:
        n = load_efficiency("resnet18", ds)
        assert n[32] / n[8] == pytest.approx(1.5, abs=1e-3), "Fig. 2: N(32)/N(8) = 15/10"
        assert list(n.values()) == sorted(n.values()), "small batches are more sample-efficient"
    # Paper §5.2: MobileNetV2 has "different r" and its picks are larger batches than
    # ResNet18's; B2's pick (the proxy's most sample-efficient batch) shows it. (The hand-set
    # curves asserted a flatter MobileNetV2 curve instead; the fit to Table 2 does not give one.)
    mnv2 = load_efficiency("mobilenetv2", "cifar10-proxy")
    assert min(mnv2, key=mnv2.get) > min(proxy, key=proxy.get)
    for model, (proxy_name, *targets) in EFFICIENCY_FILES.items():
        p = load_efficiency(model, proxy_name)
        rp = {b: v / max(p.values()) for b, v in p.items()}
        for t in targets:
            n = load_efficiency(model, t)
            rt = {b: v / max(n.values()) for b, v in n.items()}
            assert rt != rp, "a target is not an exact copy of its proxy"
            # The hand-set curves also kept every target within 20 % of its proxy's shape. The
            # fitted ones do not: the tables see a proxy only through the batch B2 and ours
            # pick (the paper publishes no proxy curve), so the fit holds the proxy's argmin
            # where Table 2-4 put it and leaves the rest to a weak prior. What remains checked
            # is that the proxy's pick is one the target also rates well (within 2x its best).
            best = min(p, key=p.get)
            assert n[best] <= 2 * min(n.values())


# ------------------------------------------------------------------------------------------
# reproducibility
# ------------------------------------------------------------------------------------------


def test_regeneration_is_byte_identical(tmp_path):
    out, eff = tmp_path / "profiles", tmp_path / "efficiency"
    assert generate.main(["--out", str(out), "--efficiency-out", str(eff)]) == 0
    for committed, fresh in ((PROFILES, out), (EFFICIENCY, eff)):
        names = sorted(p.name for p in committed.glob("*.csv"))
        assert names == sorted(p.name for p in fresh.iterdir()), "no stray or missing files"
        for name in names:
            assert (fresh / name).read_bytes() == (committed / name).read_bytes(), name


@pytest.mark.parametrize("device", sorted(DEVICES))
def test_small_cnn_profile_is_deterministic(tmp_path, device):
    """Writing the small_cnn profile twice gives the committed bytes both times."""
    committed = (PROFILES / f"{device}_small_cnn.csv").read_bytes()
    for name in ("a.csv", "b.csv"):
        path = write_profile(device, "small_cnn", tmp_path / name)
        assert path.read_bytes() == committed


def test_default_efficiency_folder_is_beside_profiles(tmp_path):
    generate.main(["--out", str(tmp_path / "profiles")])
    written = list((tmp_path / "efficiency").glob("*.csv"))
    assert len([p for p in written if not p.name.endswith(".curves.csv")]) == 9
    assert len([p for p in written if p.name.endswith(".curves.csv")]) == 6  # the targets
    assert len(list((tmp_path / "profiles").glob("*.csv"))) == 8

"""What the CSV readers refuse: fields a file states that used to be taken or skipped unread.

Each case is an audit's finding, reproduced on a real file: a trace's ``target_accuracy`` of 1.5
replayed and reported as reached; rows that disagree on it (the first one won); a curves file's
``# target_accuracy=`` that said ``banana`` (skipped) or another target than its trace's
(taken); a profile row's ``source`` that said ``predictd`` (measured) or ``Predicted``
(predicted in coverage, measured in verification); a misspelt optional column (``mean_pwr_w``:
energy from the peak). Files are written to ``tmp_path`` and read through the readers and the
command line (``fleet.cli.main``), where each refusal is one line and exit 2. Every committed
CSV must still read.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.common.errors import InputError
from fleet.core.curves import agreed_target, curves_path, load_curves
from fleet.core.efficiency import Efficiency, load_efficiency
from fleet.core.profile import load_profile
from fleet.method.profile_io import PREDICTED, SOURCES, ProfileFormatError, read_rows
from fleet.rounds.learning import curves_for
from fleet.trust.coverage import read_coverage
from fleet.trust.verify import select_verified
from tests.conftest import ROOT
from tests.refusal_helpers import one_line

PROFILES = ROOT / "simulations" / "profiles"
EFFICIENCY = ROOT / "simulations" / "efficiency"
RESNET_PROFILE = PROFILES / "nano_resnet18.csv"
RESNET_PROXY = EFFICIENCY / "resnet18_cifar10-proxy.csv"
SVHN = EFFICIENCY / "resnet18_svhn.csv"  # a trace at target 0.92, with its curves


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def profile_text(extra_col: str = "source", cells: tuple[str, str] = ("measured", "measured")):
    """A two-point profile (batch sizes 8 and 16) with one more column; data rows on lines 3, 4."""
    return (
        "# a test profile\n"
        f"batch_size,freq_mhz,time_per_batch_s,peak_power_w,mean_power_w,{extra_col}\n"
        f"8,614.4,0.1,4.0,3.5,{cells[0]}\n"
        f"16,614.4,0.15,4.5,4.0,{cells[1]}\n"
    )


def efficiency_text(targets: tuple[str, str] = ("0.92", "0.92"), comment: str = "") -> str:
    """Batch sizes 8 and 16, data rows on lines 2 and 3 (after an optional comment line)."""
    head = f"# {comment}\n" if comment else ""
    return (
        head + "batch_size,samples_to_accuracy,target_accuracy\n"
        f"8,1000,{targets[0]}\n16,1500,{targets[1]}\n"
    )


def select_argv(profile: Path, efficiency: Path) -> list[str]:
    return ["select", "--profile", str(profile), "--efficiency", str(efficiency), "--budget-w", "5"]


def trace_pair(tmp: Path, trace: str, curves: str | None) -> Path:
    """A copy of the SVHN trace (as ``trace`` text) beside its curves (as ``curves`` text)."""
    path = write(tmp / "trace.csv", trace)
    if curves is not None:
        write(curves_path(path), curves)
    return path


def whatif_argv(tmp: Path, trace: Path) -> list[str]:
    """``powerfleet whatif`` on a one-Nano fleet replaying ``trace`` (it learns by default, so
    it reads the trace's curves)."""
    fleet = write(
        tmp / "fleet.toml",
        f'[run]\nmodel = "resnet18"\nefficiency = "{RESNET_PROXY}"\ntarget_accuracy = 0.92\n\n'
        f'[[devices]]\nname = "a"\ntype = "jetson-nano"\nbudget_w = 5\n'
        f'profile = "{RESNET_PROFILE}"\ndata = "{trace}"\n',
    )
    return ["whatif", "--fleet", str(fleet), "--budgets", "5"]


# ------------------------------------------------ 1. the target_accuracy column of an efficiency


@pytest.mark.parametrize("bad", ["1.5", "0", "-0.2", "nan", "banana"])
def test_a_target_accuracy_that_is_not_an_accuracy_is_refused(tmp_path, capsys, bad):
    path = write(tmp_path / "eff.csv", efficiency_text((bad, bad)))
    with pytest.raises(InputError, match=r"eff\.csv: line 2: target_accuracy=.* \(0, 1\]"):
        load_efficiency(path)
    prof = write(tmp_path / "prof.csv", profile_text())
    one_line(capsys, select_argv(prof, path), "eff.csv: line 2", "not an accuracy", "(0, 1]")


def test_rows_that_disagree_on_the_target_are_refused_at_the_first_that_differs(tmp_path, capsys):
    path = write(tmp_path / "eff.csv", efficiency_text(("0.5", "0.92")))
    with pytest.raises(InputError, match=r"line 3: target_accuracy=0\.92 differs from 0\.5"):
        load_efficiency(path)
    prof = write(tmp_path / "prof.csv", profile_text())
    one_line(capsys, select_argv(prof, path), "eff.csv: line 3", "one target accuracy")


def test_one_target_on_every_row_is_the_file_s(tmp_path):
    eff = load_efficiency(write(tmp_path / "eff.csv", efficiency_text(("0.92", "0.920"))))
    assert eff.target_accuracy == 0.92
    assert load_efficiency(SVHN).target_accuracy == 0.92


def test_a_trace_of_accuracy_1_5_stops_a_sweep_in_one_line(tmp_path, capsys):
    text = SVHN.read_text().replace(",0.92,modeled", ",1.5,modeled")
    trace = trace_pair(tmp_path, text, None)
    one_line(capsys, whatif_argv(tmp_path, trace), "device a", "trace.csv: line", "'1.5'")


# ------------------------------------------------ 2. the "# target_accuracy=" comment of curves


CURVES = "batch_size,seed,samples,accuracy\n8,0,0,0.1\n8,0,1000,0.95\n"


@pytest.mark.parametrize("bad", ["banana", "1.5", "0"])
def test_a_curves_comment_that_is_not_an_accuracy_is_refused(tmp_path, bad):
    path = write(tmp_path / "x.curves.csv", f"# target_accuracy={bad}\n" + CURVES)
    with pytest.raises(InputError, match=r"x\.curves\.csv: comment line: target_accuracy="):
        load_curves(path)


def test_two_curves_comments_that_differ_are_refused(tmp_path):
    text = "# target_accuracy=0.92\n# target_accuracy=0.5\n" + CURVES
    with pytest.raises(InputError, match="differs from target_accuracy=0.92 in a comment above"):
        load_curves(write(tmp_path / "x.curves.csv", text))


def test_curves_of_another_target_than_their_trace_are_refused(tmp_path, capsys):
    curves = curves_path(SVHN).read_text().replace("target_accuracy=0.92", "target_accuracy=0.5")
    trace = trace_pair(tmp_path, SVHN.read_text(), curves)
    eff = load_efficiency(trace)
    said = r"target_accuracy=0\.5 differs from target_accuracy=0\.92"
    with pytest.raises(InputError, match=said):
        agreed_target(load_curves(curves_path(trace)), eff)
    with pytest.raises(InputError, match="trace.curves.csv"):
        curves_for(str(trace), eff, 0.92, 0)
    one_line(capsys, whatif_argv(tmp_path, trace), "device a", "trace.curves.csv", "0.5", "0.92")


def test_curves_that_say_nothing_are_read_at_their_trace_s_target(tmp_path):
    curves = load_curves(write(tmp_path / "x.curves.csv", CURVES))
    assert curves.target is None
    trace = Efficiency({8: 1000.0}, metadata={"target_accuracy": "0.9"})
    assert agreed_target(curves, trace) == 0.9
    assert agreed_target(curves, Efficiency({8: 1000.0})) is None


def test_an_efficiency_comment_that_contradicts_its_column_is_refused(tmp_path):
    text = efficiency_text(comment="target_accuracy=0.5 seeds=3")
    with pytest.raises(InputError, match="target_accuracy=0.5 differs from the rows'"):
        load_efficiency(write(tmp_path / "eff.csv", text))
    agreeing = efficiency_text(comment="powerfleet estimate: target_accuracy=0.92 seeds=3")
    assert load_efficiency(write(tmp_path / "ok.csv", agreeing)).target_accuracy == 0.92


# ------------------------------------------------------------------ 3. a profile row's source


def test_an_unknown_source_is_refused_naming_line_and_the_known_ones(tmp_path, capsys):
    path = write(tmp_path / "prof.csv", profile_text(cells=("measured", "predictd")))
    said = r"prof\.csv: line 4: source='predictd' is not known"
    with pytest.raises(ProfileFormatError, match=said):
        read_rows(str(path))  # the board's reader (replay, drift) and the host's alike
    for read in (load_profile, read_coverage):
        with pytest.raises(InputError, match=said):
            read(str(path))
    line = one_line(capsys, ["inspect", str(path)], "prof.csv: line 4", "'predictd'")
    assert ", ".join(SOURCES) in line


def test_a_source_in_another_case_is_one_value_everywhere(tmp_path):
    """'Predicted' is predicted for coverage and for verification alike: the reader lowercases
    it once, and both compare with the same constant."""
    path = write(tmp_path / "prof.csv", profile_text(cells=("Predicted", "MEASURED")))
    rows = [row for _line, row in read_rows(str(path))[1]]
    assert [r["source"] for r in rows] == [PREDICTED, "measured"]
    cov = read_coverage(str(path))
    assert cov.is_predicted(8, 614.4) and not cov.is_predicted(16, 614.4)
    probes: list[tuple[int, float]] = []

    def measure(b: int, f: float) -> dict:
        probes.append((b, f))
        return {"batch_size": b, "freq_mhz": f, "time_per_batch_s": 0.1, "peak_power_w": 4.0,
                "mean_power_w": 3.5, "status": "ok"}  # fmt: skip

    verified = select_verified(rows, Efficiency({8: 1000.0, 16: 3000.0}), None, measure)
    assert probes == [(8, 614.4)]  # the predicted choice was probed before it was trusted
    assert verified.choice.batch_size == 8


# --------------------------------------------------------- 4. a near miss of a known column


@pytest.mark.parametrize("typo, meant", [
    ("mean_pwr_w", "mean_power_w"),
    ("idle_pwr_w", "idle_power_w"),
    ("idle_power_mw", "idle_power_w"),
])  # fmt: skip
def test_a_misspelt_profile_column_is_refused_naming_the_known_one(tmp_path, capsys, typo, meant):
    path = write(tmp_path / "prof.csv", profile_text(typo, ("3.0", "3.0")))
    said = f"{path}: column '{typo}' is not known; did you mean {meant}?"
    with pytest.raises(InputError) as exc:
        load_profile(path)
    assert str(exc.value) == said
    eff = write(tmp_path / "eff.csv", efficiency_text())
    assert one_line(capsys, select_argv(path, eff)).endswith(said)


@pytest.mark.parametrize("extra", ["notes", "time_per_batch_std_s", "emc_freq_mhz", "gpu_temp_c"])
def test_an_extra_column_unlike_any_known_one_is_kept(tmp_path, extra):
    prof = load_profile(write(tmp_path / "prof.csv", profile_text(extra, ("a", "b"))))
    assert prof.batch_sizes == [8, 16]


def test_misspelt_efficiency_and_curves_columns_are_refused(tmp_path, capsys):
    text = efficiency_text().replace("target_accuracy", "target_acuracy")
    eff = write(tmp_path / "eff.csv", text)
    with pytest.raises(InputError, match="column 'target_acuracy' is not known; did you mean"):
        load_efficiency(eff)
    prof = write(tmp_path / "prof.csv", profile_text())
    one_line(capsys, select_argv(prof, eff), "eff.csv: column 'target_acuracy'", "target_accuracy")
    curves = write(tmp_path / "x.curves.csv", CURVES.replace("accuracy\n", "accuracy,b_nois\n"))
    with pytest.raises(InputError, match="column 'b_nois' is not known; did you mean b_noise"):
        load_curves(curves)


# ---------------------------------------------------------------- every committed file reads


def committed_csvs() -> list[Path]:
    places = ("simulations", "benchmarks/published", "docs", "tests")
    return sorted(p for place in places for p in (ROOT / place).rglob("*.csv"))


def test_every_committed_profile_efficiency_and_curves_file_still_reads():
    read = 0
    for path in committed_csvs():
        header = next(
            line for line in path.read_text().splitlines() if line.strip() and line[0] != "#"
        ).split(",")
        if path.name.endswith(".curves.csv"):
            trace = path.with_name(path.name[: -len(".curves.csv")] + ".csv")
            agreed_target(load_curves(path), load_efficiency(trace))
        elif "freq_mhz" in header and "time_per_batch_s" in header:
            load_profile(path)
        elif "samples_to_accuracy" in header and "seed" not in header:
            load_efficiency(path)
        else:
            continue
        read += 1
    assert read >= 40  # the reference profiles, traces and curves are all here

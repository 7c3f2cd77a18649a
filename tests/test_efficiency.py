import math

import pytest

from fleet.common.errors import InputError
from fleet.core.efficiency import Efficiency, load_efficiency, save_efficiency
from fleet.method.selection import scaled_lr


def test_ratios_unreached_and_roundtrip(write, tmp_path):
    src = write(
        "e.csv",
        "batch_size,samples_to_accuracy,std,runs,dataset",
        ["4,8000,100,5,cifar10", "8,10000,120,5,cifar10", "32,15000,0,5,cifar10", "64,,,5,cifar10"],
    )
    eff = load_efficiency(src)
    assert eff.unreached == [64]
    assert eff.ratios() == {4: 8000 / 15000, 8: 10000 / 15000, 32: 1.0}
    assert eff.best_batch() == 4
    assert eff.metadata["dataset"] == "cifar10"
    out = tmp_path / "out.csv"
    save_efficiency(eff, out, comments=["roundtrip"])
    again = load_efficiency(out)
    assert again.reached == eff.reached
    assert again.unreached == [64]
    assert again.std == eff.std and again.runs == eff.runs


def test_best_batch_ties_go_to_larger_batch():
    eff = Efficiency({8: 100.0, 16: 100.0, 32: 120.0})
    assert eff.best_batch() == 16


@pytest.mark.parametrize(
    "rows,message",
    [
        (["8,abc"], "line 2: samples_to_accuracy='abc' is not a number"),
        (["8,-5"], "line 2: samples_to_accuracy='-5' must be a finite number > 0"),
        (["8,100", "8,200"], "line 3: duplicate batch_size=8"),
        (["0,100"], "batch_size='0' must be a finite number > 0"),
    ],
)
def test_malformed_efficiency(write, rows, message):
    src = write("e.csv", "batch_size,samples_to_accuracy", rows)
    with pytest.raises(InputError) as info:
        load_efficiency(src)
    assert message in str(info.value) and str(src) in str(info.value)


def test_missing_column(write):
    src = write("e.csv", "batch,samples", ["8,100"])
    with pytest.raises(InputError, match="missing column"):
        load_efficiency(src)


def test_nothing_reached_is_an_error():
    with pytest.raises(InputError, match="no batch size reached"):
        Efficiency({8: math.nan}, source="x.csv").ratios()


def test_lr_scaling_matches_hand_computed():
    # Paper: 5e-4 at b=128 for Adam; square root scaling.
    assert scaled_lr(32, 128, 5e-4, "adam") == pytest.approx(2.5e-4)
    assert scaled_lr(512, 128, 1e-3, "AdamW") == pytest.approx(2e-3)
    assert scaled_lr(32, 128, 0.4, "sgd") == pytest.approx(0.1)
    with pytest.raises(InputError, match="unknown optimizer 'rmsprop'"):
        scaled_lr(32, 128, 0.1, "rmsprop")
    with pytest.raises(InputError, match="must all be > 0"):
        scaled_lr(0, 128, 0.1)

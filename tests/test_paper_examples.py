"""The paper's worked examples, on the modeled Jetson Nano ResNet18 reference profile."""

from pathlib import Path

import pytest

from fleet.core.efficiency import Efficiency
from fleet.core.profile import frontier, load_profile
from fleet.core.selection import select
from fleet.method.selection import choose

ROOT = Path(__file__).resolve().parents[1]
NANO_RESNET = ROOT / "simulations" / "profiles" / "nano_resnet18.csv"


def test_fig2_choice_flips_between_budgets_as_the_paper_describes():
    """N_s_acc(8)=10, N_s_acc(32)=15: b=8 wins at 4.5 W and 5 W, b=32 wins at 7 W (§3)."""
    prof = load_profile(NANO_RESNET).restrict([8, 32])
    s = 4096  # the fixed sample count; only ratios matter
    eff = Efficiency({8: 10.0 * s, 32: 15.0 * s}, source="fig2")
    chosen = {w: select(prof, eff, w).batch_size for w in (4.5, 5.0, 7.0)}
    assert chosen == {4.5: 8, 5.0: 8, 7.0: 32}
    for w in (4.5, 5.0, 7.0):
        fr = frontier(prof, w)
        # b=8 runs at a higher clock than b=32 at every budget...
        assert fr[8].freq_mhz > fr[32].freq_mhz
        # ...yet b=32 is always faster per fixed sample count (T_s), the paper's point
        assert fr[32].time_per_sample_s < fr[8].time_per_sample_s
        c = select(prof, eff, w)
        want = choose(prof.points, eff.reached, w)
        assert (c.batch_size, c.freq_mhz) == (want.batch_size, want.freq_mhz)
        assert c.peak_power_w <= w


def test_fig1_joint_selection_beats_largest_batch_at_5w():
    """At 5 W, b=128 fits only up to 307 MHz; b=64 runs at 460.8 MHz and is ~31.9 % faster."""
    prof = load_profile(NANO_RESNET)
    fr = frontier(prof, 5.0)
    assert fr[128].freq_mhz == pytest.approx(307.2)
    assert fr[64].freq_mhz == pytest.approx(460.8)
    saving = 1 - fr[64].time_per_sample_s / fr[128].time_per_sample_s
    assert saving == pytest.approx(0.319, abs=0.02)

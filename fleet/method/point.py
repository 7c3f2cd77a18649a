"""One profiled operating point: the type the host, the board and equation 4 all read.

Why one type: the coordinator loads a profile CSV into points (``fleet.core.profile``), the board
builds its LUT from the same rows (``fleet.method.selection.lut_from_rows``), and equation 4, the
baselines and the deadline arithmetic read the same fields on both. Two types with the same
fields drifted once (the board folded a predicted point's bound into its peak, the host kept it
apart); now there is this one, and the budget is held against ``guard_peak_w`` everywhere.

A NamedTuple, not a dataclass: the board runs Python 3.6 (docs/architecture.md, layers).

Python 3.6 compatible, stdlib only.
"""

import math
from typing import NamedTuple

_NAN = float("nan")

_PointFields = NamedTuple(
    "_PointFields",
    [
        ("batch_size", int),
        ("freq_mhz", float),
        ("time_per_batch_s", float),
        ("peak_power_w", float),  # NaN when the profile is time-only
        ("mean_power_w", float),  # falls back to the peak when not measured
        # a predicted point's upper bound on its peak (``fleet.agent.prediction.predict``); NaN
        # when measured
        ("peak_power_bound_w", float),
    ],
)


class Point(_PointFields):
    """One measured (or predicted) operating point of a device x model x input shape."""

    __slots__ = ()

    def __new__(
        cls,
        batch_size: int,
        freq_mhz: float,
        time_per_batch_s: float,
        peak_power_w: float,
        mean_power_w: float,
        peak_power_bound_w: float = _NAN,
    ) -> "Point":
        return _PointFields.__new__(
            cls,
            batch_size,
            freq_mhz,
            time_per_batch_s,
            peak_power_w,
            mean_power_w,
            peak_power_bound_w,
        )

    @property
    def time_per_sample_s(self) -> float:
        return self.time_per_batch_s / self.batch_size

    @property
    def guard_peak_w(self) -> float:
        """The peak a budget is held against: a predicted point's upper bound when it has one
        (a prediction 2 % low must not put a board over its budget), else the measured peak."""
        if math.isnan(self.peak_power_bound_w):
            return self.peak_power_w
        return max(self.peak_power_w, self.peak_power_bound_w)


def tie_peak(p: Point) -> float:
    """The peak that breaks ties (lower first): the guarded peak, an unmeasured one last."""
    return _INF if math.isnan(p.peak_power_w) else p.guard_peak_w


_INF = float("inf")

"""What a profile sweep measures, and how a predicted profile probes: two records, not 22 arguments.

Why records: the agent's ``profile`` request, ``powerfleet profile``, ``powerfleet train``'s
profile-first and the GPU check all ask the profiler for the same things (model and shape, the
grid, the per-point evidence, the budget for a staircase); carried as one typed record the
profiler checks it once, before any point runs, and a new setting is one field here rather than
one more argument on every caller. The predicted design's settings are their own record: a
sweep either measures its grid (or staircase) or probes a design and predicts the rest.
NamedTuples with a ``__new__`` for defaults: the board runs Python 3.6.
"""

from typing import Any, Dict, NamedTuple, Optional, Sequence

from fleet.method.power_window import MIN_SAMPLER_HZ

DEFAULT_BATCH_SIZES = (4, 8, 16, 32, 64, 128)
DEFAULT_STEPS = 5  # timed steps per point, a minimum (a point also runs to its evidence)
DEFAULT_WARMUP = 2  # untimed steps per point
IDLE_WINDOW_S = 1.0  # how long the idle rail is read before the sweep

_SweepFields = NamedTuple(
    "_SweepFields",
    [
        ("model_name", str),
        ("input_shape", Any),
        ("batch_sizes", Sequence[int]),
        ("freqs", Optional[Sequence[float]]),
        ("steps", int),
        ("warmup", int),
        ("budget_w", Optional[float]),
        ("sampler_hz", float),
        ("num_classes", Optional[int]),
        ("min_window_s", Optional[float]),
        ("min_power_samples", Optional[int]),
        ("seed", int),
        ("idle_s", float),
    ],
)


class SweepPlan(_SweepFields):
    """A sweep: ``model_name`` at ``input_shape`` over ``batch_sizes`` x ``freqs`` (None: every
    frequency the backend offers), the full grid or the staircase under ``budget_w``.
    ``steps``/``warmup`` are each point's minimums; ``min_window_s``/``min_power_samples`` the
    evidence a point with a power reading must hold (None: ``measurers``' defaults);
    ``num_classes`` a text model's vocabulary (None: the model's default); ``idle_s`` how long
    the idle rail is read first (0: not at all)."""

    __slots__ = ()

    def __new__(
        cls,
        model_name: str,
        input_shape: Any = None,
        batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
        freqs: Optional[Sequence[float]] = None,
        steps: int = DEFAULT_STEPS,
        warmup: int = DEFAULT_WARMUP,
        budget_w: Optional[float] = None,
        sampler_hz: float = MIN_SAMPLER_HZ,
        num_classes: Optional[int] = None,
        min_window_s: Optional[float] = None,
        min_power_samples: Optional[int] = None,
        seed: int = 0,
        idle_s: float = IDLE_WINDOW_S,
    ) -> "SweepPlan":
        return super().__new__(
            cls, model_name, input_shape, batch_sizes, freqs, steps, warmup, budget_w,
            sampler_hz, num_classes, min_window_s, min_power_samples, seed, idle_s,
        )  # fmt: skip


_PredictFields = NamedTuple(
    "_PredictFields",
    [
        ("max_probes", Optional[int]),
        ("adapt_budgets", Optional[Sequence[Optional[float]]]),
        ("adapt_efficiency", Optional[Dict[int, float]]),
        ("adapt_probes", Optional[int]),
    ],
)


class PredictPlan(_PredictFields):
    """Probe the design of ``prediction.design.design_probes`` (at most ``max_probes``, default
    a quarter of the grid) and fill the rest with ``source=predicted`` rows; with
    ``adapt_budgets``, then up to ``adapt_probes`` more points (default a tenth of the grid)
    where a measurement could change the choice at those budgets (``adapt_efficiency``: samples
    to accuracy per batch size, default every batch size alike)."""

    __slots__ = ()

    def __new__(
        cls,
        max_probes: Optional[int] = None,
        adapt_budgets: Optional[Sequence[Optional[float]]] = None,
        adapt_efficiency: Optional[Dict[int, float]] = None,
        adapt_probes: Optional[int] = None,
    ) -> "PredictPlan":
        return super().__new__(cls, max_probes, adapt_budgets, adapt_efficiency, adapt_probes)

"""Online correction of the samples-to-target while training: one learner, every runner.

Why one class: the board's closed loop, the replay device on the virtual clock and real
training on a host all learn the same way, so a simulation shows what a board will do. The
learner holds the belief (``efficiency_belief``): the shipped vector as prior, then the shape
the gradient noise scale measured (``noise_scale``), then the device's own learning curve
(``learning_curve``) at the batch size it runs. Its ``efficiency()`` is what the chooser uses
from then on; ``done()`` is the fraction of the target reached as the belief now prices the
samples already trained.

The curve is refitted when the samples trained have grown by ``REFIT_GROWTH`` since the last fit
(a geometric cadence: a few dozen fits per run, however often the trainer evaluates). Samples
trained at another batch size count, in the fit, as the samples that would have done the same
work at the running one (``N(b_now) / N(b_then)`` of them, by the belief before this fit), so
one fit always speaks of the running batch size and a switch does not start the curve afresh.
A new fit at a batch size replaces that batch size's fit before it (they share their data): the
belief is the prior, the latest shape and each batch size's latest fit, never an accumulation of
the same evidence. A batch size the device left keeps its last fit, so the reason it left stays
in the belief and the device does not flap back on the prior alone.

A new choice is only worth a switch when it saves ``SWITCH_MARGIN`` of the remaining cost
(``worth_switching``) at the belief's median for a batch size not yet run (``SWITCH_Z = 0``: the
least expected time; on the image analogue a one-sd rule kept the proxy's choice in every cell
it cost most), and never, on learning alone, back to one the device left (``RETURN_Z``): an
estimate that wobbles between two near-equal points must not make the device flap between them
(a budget change still chooses afresh).

Python 3.6 compatible, stdlib only.
"""

import math
from typing import Any, Dict, List, Optional, Tuple

from fleet.agent.learning.efficiency_belief import PROXY_TRUST, Belief, PriorTrust, prior_belief
from fleet.agent.learning.learning_curve import MIN_POINTS, RECENT, CurveFit, fit_curve

REFIT_GROWTH = 1.1  # refit when the samples trained grew by 10 % since the last fit
SWITCH_MARGIN = 0.03  # a new point must save 3 % of the remaining cost to be worth a switch
SWITCH_Z = 0.0  # ... at the belief's median (risk-neutral: the least expected time)
#: ... but no return, on learning alone, to a batch size the run left: the one left had its
#: whole curve for evidence, the new one only its first stretch, and any rule that weighs the
#: two flaps between them (on the virtual board: 64, 16, 64, 16, ... at z = 0; 64, 16, 64 at 1)
RETURN_Z = math.inf
DEADLINE_Z = 0.5  # the deadline objective prices the work left this many sd up
#: sd of a run's own samples-to-target around its data's mean (seed to seed: data order and
#: augmentation), added to every curve fit: the belief is about the data, the fit about one run
RUN_SD = 0.12
#: sd of log N(b) / N(b_ref) the noise-scale law misses by on real curves, per batch size and
#: along the tilt: on the image analogue's three datasets its RMS log error is 0.06-0.13, of
#: which a slope of -0.02..+0.05 per octave and a per-batch residual of 0.01-0.05
#: (``benchmarks/efficiency_learning.py --part calibrate``); a proxy whose own curves measured
#: a larger error (``noise_law_err`` in its efficiency file) widens the per-batch part ...
NOISE_LAW_SD = 0.05
NOISE_TILT_SD = 0.15
#: ... and past this the law is not taken at all: on the char transformer (AdamW, square-root
#: lr scaling) the warm noise scale is in the hundreds to millions while the measured shape
#: is steep (RMS log error 0.5-0.9), so a device that believed it would run far too large a batch
MAX_LAW_ERR = 0.25
#: a noise-scale reading whose log is this uncertain (or infinitely: the tracker's first windows,
#: where the mean gradient's estimate is not yet above its noise) says nothing of the shape
MAX_NOISE_SE = 0.5
MODES = ("none", "online", "device", "all")
MAX_STATE_POINTS = 400  # evaluations a resumable state keeps (older ones thinned)
MAX_STATE_EVENTS = 30  # fits a resumable state keeps (the latest)
KEEP_POINTS = MIN_POINTS + 1


class EfficiencyLearner(object):
    """The device's running estimate of its samples-to-target per batch size."""

    def __init__(
        self,
        shipped: Dict[int, float],
        target: float,
        rel_std: Optional[Dict[int, float]] = None,
        trust: PriorTrust = PROXY_TRUST,
        online: bool = True,
        noise: bool = False,
        every: Optional[float] = None,
        law_err: Optional[float] = None,
    ) -> None:
        self.shipped = dict(shipped)
        self.target = float(target)
        self.prior = prior_belief(self.shipped, trust, rel_std)
        self.belief = self.prior.copy()
        self.online = bool(online)  # fit the learning curve
        # take the noise scale's shape only where the law was checked on the proxy's own runs
        # and held (a vector without ``noise_law_err`` was never checked: the law is not used)
        self.law_sd = max(NOISE_LAW_SD, law_err or 0.0)
        self.noise = bool(noise) and law_err is not None and self.law_sd <= MAX_LAW_ERR
        self.every = every
        self.curve = []  # type: List[Tuple[float, float]]  # (samples trained, accuracy)
        self.ran = []  # type: List[List[float]]  # [batch, samples] per stretch, in order
        self.fit = None  # type: Optional[CurveFit]  # the latest fit ...
        self.fit_batch = None  # type: Optional[int]  # ... and the batch size it speaks of
        # every batch size's last fit: a batch size left behind keeps what its curve said (so
        # the device does not forget why it left, and cannot flap back on the prior alone)
        self.fits = {}  # type: Dict[int, CurveFit]
        self._next_fit = 0.0
        self._shape = None  # type: Optional[Tuple[Dict[int, float], float, float, str]]
        self.events = []  # type: List[Dict[str, Any]]
        # the samples trained when ``reached()`` took the target as met (None: not yet)
        self._reached_at = None  # type: Optional[float]

    # -- evidence -------------------------------------------------------------------------------
    def trained(self, batch: int, samples: float) -> None:
        """``samples`` more were trained at ``batch``."""
        if samples <= 0:
            return
        if self.ran and self.ran[-1][0] == batch:
            self.ran[-1][1] += samples
        else:
            self.ran.append([int(batch), float(samples)])

    @property
    def has_evidence(self) -> bool:
        """Whether anything beyond the shipped vector moved the belief."""
        return self.fit is not None or self._shape is not None

    @property
    def samples(self) -> float:
        return sum(s for _, s in self.ran)

    def noise_shape(self, ratios: Dict[int, float], rel_se: float, label: str = "noise") -> bool:
        """The noise scale's shape (``noise_scale.shape_from_noise``) with its standard error;
        the latest replaces the one before. True when the belief changed."""
        if not self.noise or not ratios or not (0 <= rel_se <= MAX_NOISE_SE):
            return False
        tilt = NOISE_TILT_SD**2 + rel_se**2 * 0.25
        self._shape = (dict(ratios), self.law_sd**2, tilt, label)
        self._rebuild()
        return True

    def evaluated(self, accuracy: float, t_s: Optional[float] = None) -> bool:
        """The trainer evaluated at the samples trained so far; True when a refit changed the
        belief (the caller may then re-select)."""
        if not math.isfinite(accuracy):
            return False
        now = self.samples
        if self.curve and now <= self.curve[-1][0]:
            return False
        self.curve.append((now, float(accuracy)))
        self._prune()
        return self._maybe_fit(t_s)

    def _prune(self) -> None:
        """Drop evaluations no later fit reads: fits read only the last ``1 - RECENT`` of the
        samples (``learning_curve.RECENT``), so what lies below half of that is dead weight in
        memory and in every resumable state (kept: the last ``MIN_POINTS`` + 1 whatever)."""
        if len(self.curve) <= KEEP_POINTS:
            return
        floor = 0.5 * RECENT * self.curve[-1][0]
        cut = 0
        while cut < len(self.curve) - KEEP_POINTS and self.curve[cut][0] < floor:
            cut += 1
        if cut:
            del self.curve[:cut]

    def _maybe_fit(self, t_s: Optional[float]) -> bool:
        now = self.curve[-1][0]
        if not self.online or not self.ran or now < self._next_fit:
            return False
        self._next_fit = now * REFIT_GROWTH
        b = int(self.ran[-1][0])
        if b not in self.belief.batch_sizes:
            return False
        fit = fit_curve(self._equivalent(b), self.target, self.every)
        if fit is None or not math.isfinite(fit.samples):
            return False
        self.fit, self.fit_batch = fit, b
        self.fits[b] = fit
        before = self.belief.median().get(b)
        self._rebuild()
        after = self.belief.median().get(b)
        self.events.append(
            {
                "t_s": t_s,
                "samples": now,
                "batch_size": b,
                "fit_samples": fit.samples,
                "fit_log_sd": fit.log_sd,
                "estimate": after,
                "before": before,
            }
        )
        return True

    def switch_z(self, candidate: int) -> float:
        """How far up the belief's doubt a switch to ``candidate`` is priced (``worth_switching``):
        ``RETURN_Z`` (never) for a batch size this run already left, ``SWITCH_Z`` otherwise."""
        left = any(int(b) == int(candidate) for b, _ in self.ran[:-1])
        return RETURN_Z if left else SWITCH_Z

    # -- what the chooser reads -----------------------------------------------------------------
    def efficiency(self, z: float = 0.0) -> Dict[int, float]:
        """Samples-to-target per batch size as the device now believes: medians, or ``z``
        standard deviations up (a deadline is planned on ``DEADLINE_Z``: on time with some
        confidence, not by a coin toss)."""
        if z == 0.0 or not self.has_evidence:  # nothing learnt: the shipped vector as it is
            return self.belief.median()
        return dict(
            (b, math.exp(m + z * self.belief.sd(b)))
            for b, m in zip(self.belief.batch_sizes, self.belief.mean)
        )

    def done(self) -> float:
        """Fraction of the target reached, the samples trained priced by the belief now."""
        eff = self.efficiency()
        total = 0.0
        for b, s in self.ran:
            n = eff.get(int(b))
            if n:
                total += s / n
        return min(total, 1.0)

    def estimate(self) -> Optional[Tuple[int, float, float]]:
        """(running batch, samples-to-target there, sd of its log) — what a progress reply
        carries; None before anything ran."""
        if not self.ran:
            return None
        b = int(self.ran[-1][0])
        if b not in self.belief.batch_sizes:
            return None
        return b, self.belief.median()[b], self.belief.sd(b)

    def summary(self) -> Dict[str, Any]:
        """What the device reports: its belief, the fits, and its evidence for the fleet (the
        latest fit, with the batch size it speaks of)."""
        out = {"belief": self.belief.to_dict(), "fits": [dict(e) for e in self.events]}
        ev = self.evidence()
        if ev is not None:
            out["evidence"] = ev
        return out

    def evidence(self) -> Optional[Dict[str, Any]]:
        """This run's own evidence (not the prior): samples-to-target at one batch size with
        the sd of its log, in samples of that batch size; None when nothing was learnt."""
        if self.fit is None or self.fit_batch is None:
            return None
        return {
            "batch_size": self.fit_batch,
            "samples_to_target": self.fit.samples,
            "log_sd": math.sqrt(self.fit.log_sd**2 + RUN_SD**2),
            "reached": bool(self.fit.reached),
        }

    def reached(self) -> None:
        """The target was met with the samples trained so far: the fit is exact (the samples
        trained, counted at the running batch size).

        Once per run: a run resumed after it met its target (a segment sent again because its
        reply was lost, a coordinator or a board restarted after the last checkpoint) is told
        so again, and counting the same samples a second time would price those trained at a
        batch size it left with a belief that already holds this exact count: another number
        for the same run. The state carries that it was taken (``reached_at``)."""
        if not self.ran or self._reached_at is not None:
            return
        b = int(self.ran[-1][0])
        if b not in self.belief.batch_sizes:
            return
        n = self._to_equivalent(b, self.samples)
        self.fit = CurveFit(n, 0.02, 1.0, math.nan, math.nan, len(self.curve), n, True)
        self.fit_batch = b
        self.fits[b] = self.fit
        self._reached_at = self.samples
        self._rebuild()

    # -- resuming -------------------------------------------------------------------------------
    def state(self) -> Dict[str, Any]:
        """What a resumed run needs to go on learning where this one stopped (a segmented
        replay carries it in its progress; a board keeps it in the trainer's checkpoint)."""
        curve = self.curve[-MAX_STATE_POINTS:]
        out = {
            "curve": [[s, a] for s, a in curve],
            "ran": [[int(b), s] for b, s in self.ran],
            "next_fit": self._next_fit,
        }  # type: Dict[str, Any]
        if self._shape is not None:
            ratios, var_each, var_tilt, label = self._shape
            out["shape"] = {
                "ratios": [[int(b), r] for b, r in sorted(ratios.items())],
                "var_each": var_each,
                "var_tilt": var_tilt,
            }
        if self.fit is not None and self.fit_batch is not None:  # the belief as it stands
            out["fit"] = [self.fit_batch, self.fit.samples, self.fit.log_sd, int(self.fit.reached)]
            out["fits"] = [
                [b, f.samples, f.log_sd, int(f.reached)] for b, f in sorted(self.fits.items())
            ]
        out["events"] = [dict(e) for e in self.events[-MAX_STATE_EVENTS:]]
        if self._reached_at is not None:
            out["reached_at"] = self._reached_at
        return out

    def restore(self, state: Dict[str, Any]) -> None:
        """Go on from ``state()`` (checked: a malformed state is a ValueError naming it)."""
        if not isinstance(state, dict):
            raise ValueError("learning state: expected an object")
        curve = _pairs(state.get("curve", []), "learning state curve", MAX_STATE_POINTS * 2)
        ran = _pairs(state.get("ran", []), "learning state ran", 10000)
        self.curve = [(s, a) for s, a in curve]
        self.ran = [[int(b), s] for b, s in ran if b >= 1 and s >= 0]
        nf = state.get("next_fit", 0.0)
        self._next_fit = float(nf) if isinstance(nf, (int, float)) and math.isfinite(nf) else 0.0
        shape = state.get("shape")
        if isinstance(shape, dict):
            ratios = dict(
                (int(b), r) for b, r in _pairs(shape.get("ratios", []), "shape", 64) if r > 0
            )
            ve, vt = shape.get("var_each"), shape.get("var_tilt")
            if (
                ratios
                and isinstance(ve, (int, float))
                and isinstance(vt, (int, float))
                and ve >= 0
                and vt >= 0
            ):
                self._shape = (ratios, float(ve), float(vt), "noise")
        fit = _fit_of(state.get("fit"))
        if fit is not None:
            self.fit_batch, self.fit = fit
        self.fits = {}
        for entry in state.get("fits") or ([state["fit"]] if fit is not None else []):
            got = _fit_of(entry)
            if got is not None:
                self.fits[got[0]] = got[1]
        events = state.get("events")
        if isinstance(events, list):
            self.events = [dict(e) for e in events[-MAX_STATE_EVENTS:] if isinstance(e, dict)]
        at = state.get("reached_at")  # a state from before the finish has none
        self._reached_at = None
        if isinstance(at, (int, float)) and not isinstance(at, bool):
            self._reached_at = float(at) if math.isfinite(at) and at >= 0 else None
        self._rebuild()

    # -- helpers --------------------------------------------------------------------------------
    def _rebuild(self) -> None:
        belief = self.prior.copy()
        if self._shape is not None:
            ratios, var_each, var_tilt, label = self._shape
            belief.observe_shape(ratios, var_each, var_tilt, label)
        for b, fit in sorted(self.fits.items()):
            var = fit.log_sd**2 + RUN_SD**2
            belief.observe(b, math.log(fit.samples), var, "curve")
        self.belief = belief

    def _bounds(self, b: int) -> List[Tuple[float, float]]:
        """Cumulative (real samples, samples-equivalent at ``b``) at each stretch's end."""
        eff = self.belief.median()
        nb = eff.get(b)
        bounds = []
        real = equiv = 0.0
        for bb, s in self.ran:
            real += s
            nbb = eff.get(int(bb))
            equiv += s * (nb / nbb if nb and nbb else 1.0)
            bounds.append((real, equiv))
        return bounds

    def _to_equivalent(self, b: int, samples: float) -> float:
        return _map(samples, self._bounds(b))

    def _equivalent(self, b: int) -> List[Tuple[float, float]]:
        """The curve with every sample counted as work at batch ``b`` (module docstring)."""
        bounds = self._bounds(b)
        return [(_map(s, bounds), a) for s, a in self.curve]


def shape_from_noise(b_noise: float, batch_sizes: List[int]) -> Optional[Dict[int, float]]:
    """``N(b) / N(max b)`` by the large-batch law ``N(b) ~ 1 + b / B_noise`` (McCandlish et al.
    2018); None when the noise scale carries no shape (no variance measured)."""
    if not (b_noise > 0) or math.isnan(b_noise) or not batch_sizes:
        return None
    top = max(batch_sizes)
    if math.isinf(b_noise):
        return dict((b, 1.0) for b in batch_sizes)
    return dict((b, (b_noise + b) / (b_noise + top)) for b in batch_sizes)


def _fit_of(raw: Any) -> Optional[Tuple[int, CurveFit]]:
    """(batch, fit) from a state's ``[batch, samples, log_sd, reached]``; None if not that."""
    if not isinstance(raw, list) or len(raw) != 4:
        return None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in raw):
        return None
    b, n, sd, reached = raw
    if not (b >= 1 and 0 < n < 1e15 and 0 <= sd < 100):
        return None
    return int(b), CurveFit(float(n), float(sd), 1.0, math.nan, math.nan, 0, n, bool(reached))


def _pairs(raw: Any, where: str, limit: int) -> List[Tuple[float, float]]:
    if not isinstance(raw, list) or len(raw) > limit:
        raise ValueError("{}: expected a list of at most {} pairs".format(where, limit))
    out = []  # type: List[Tuple[float, float]]
    for item in raw:
        ok = isinstance(item, (list, tuple)) and len(item) == 2
        if not ok or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            for v in item
        ):
            raise ValueError("{}: expected [number, number] pairs, got {!r}".format(where, item))
        out.append((float(item[0]), float(item[1])))
    return out


def _map(s: float, bounds: List[Tuple[float, float]]) -> float:
    """Real samples -> equivalent samples, piecewise linear over the stretches."""
    prev_r = prev_e = 0.0
    for r, e in bounds:
        if s <= r:
            return prev_e + (e - prev_e) * ((s - prev_r) / (r - prev_r) if r > prev_r else 1.0)
        prev_r, prev_e = r, e
    return prev_e + (s - prev_r)


def worth_switching(
    belief: Belief,
    running: Tuple[int, float],
    candidate: Tuple[int, float],
    z: Optional[float] = None,
) -> bool:
    """Is a switch from the running (batch, cost per sample) to a candidate worth it? Only when
    the candidate saves ``SWITCH_MARGIN`` of the remaining cost even ``z`` standard deviations
    up the belief's uncertainty about the two batch sizes' samples-to-target (their contrast:
    a batch size the device never ran is less certain than the one it is fitting). At the
    same batch size only the price per sample differs and that is known: the margin alone."""
    z = SWITCH_Z if z is None else z
    (b0, c0), (b1, c1) = running, candidate
    if not (c0 > 0 and c1 > 0) or math.isinf(z):
        return False
    if b0 == b1:
        return c1 < c0 * (1.0 - SWITCH_MARGIN)
    mean, sd = belief.contrast(b1, b0)
    return math.log(c1 / c0) + mean + z * sd < math.log(1.0 - SWITCH_MARGIN)


def learning_mode(raw: Any) -> str:
    """``[run] learn_efficiency``: none | online (curve) | device (noise scale) | all."""
    value = "online" if raw is None else str(raw).strip().lower()
    if value not in MODES:
        raise ValueError("expected one of {}, got {!r}".format(", ".join(MODES), raw))
    return value

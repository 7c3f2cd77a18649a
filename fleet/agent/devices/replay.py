"""A virtual device that replays a recorded profile CSV.

Why: the profiler, the staircase plan and the agent's protocol must be testable (and demoable)
without a board. This backend answers with what a real board once measured: its frequency list is
the file's, locking checks membership, and the power reading is the recorded mean power of the
locked point at the batch size currently "running" (``set_workload``). ``measure(b, f)`` gives
the staircase plan a ready-made measuring function.

Python 3.6 compatible, stdlib only.
"""

import math
from typing import Dict, List, Optional, Tuple

from fleet.agent.devices.base import Backend, BackendSpec, Capabilities, DeviceError, Option
from fleet.method.profile_io import (
    REQUIRED_COLUMNS,
    Measurement,
    ProfileFormatError,
    cell_number,
    read_rows,
)


def _num(
    path: str, lineno: int, row: Dict[str, str], field: str, required: bool, zero_ok: bool = False
) -> Optional[float]:
    """The cell as a finite number > 0 (>= 0 where ``zero_ok``: a power), or None where it is
    empty and not ``required``. Why so strict: a replayed board answers with these numbers as
    if measured, and a profile written from them must be one ``inspect`` accepts."""
    cell = row.get(field, "")
    if cell == "":
        if required:
            raise DeviceError(
                "{}: line {}: {} is empty, expected a number".format(path, lineno, field)
            )
        return None
    try:
        value = float(cell)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and (value >= 0 if zero_ok else value > 0)):
        raise DeviceError(
            "{}: line {}: {} = {!r}, expected a finite number {} 0".format(
                path, lineno, field, cell, ">=" if zero_ok else ">"
            )
        )
    return value


class ReplayBackend(Backend):
    """Replays ``profile_csv``. ``lock_log`` lists every frequency passed to ``lock()``."""

    name = "replay"

    def __init__(self, profile_csv: str) -> None:
        self.profile_csv = profile_csv
        try:
            header, rows, _ = read_rows(profile_csv)
        except ProfileFormatError as exc:
            raise DeviceError(str(exc)) from exc
        missing = [c for c in REQUIRED_COLUMNS if c not in header]
        if missing:
            raise DeviceError(
                "{}: missing column(s) {}; expected {}".format(
                    profile_csv, ", ".join(missing), ", ".join(REQUIRED_COLUMNS)
                )
            )
        # (batch, freq) -> Measurement, or None for points recorded as not runnable (e.g. oom).
        self._points: Dict[Tuple[int, float], Optional[Measurement]] = {}
        freqs = set()
        self._device = ""
        self.recorded = {}  # type: Dict[str, str]
        # the recorded board's idle power (a profile's idle_power_w), passed on by the profiler
        self.idle_power_w = None  # type: Optional[float]
        for lineno, row in rows:
            batch = _num(profile_csv, lineno, row, "batch_size", True)
            freq = _num(profile_csv, lineno, row, "freq_mhz", True)
            assert batch is not None and freq is not None
            if batch != int(batch):
                raise DeviceError(
                    "{}: line {}: batch_size = {!r}, expected an integer".format(
                        profile_csv, lineno, row["batch_size"]
                    )
                )
            if (int(batch), freq) in self._points:
                raise DeviceError(
                    "{}: line {}: duplicate point batch_size={}, freq_mhz={:g}; expected one "
                    "row per operating point".format(profile_csv, lineno, int(batch), freq)
                )
            freqs.add(freq)
            self._device = self._device or row.get("device", "")
            for key in ("model", "input_shape"):  # what the recorded numbers are of
                self.recorded.setdefault(key, row.get(key, "").strip())
            if self.idle_power_w is None and row.get("idle_power_w", "") != "":
                # any number: a non-positive one is not passed on (the profiler's choice)
                idle = cell_number(row["idle_power_w"])
                if idle is None:
                    raise DeviceError(
                        "{}: line {}: idle_power_w = {!r}, expected a number".format(
                            profile_csv, lineno, row["idle_power_w"]
                        )
                    )
                self.idle_power_w = idle
            status = (row.get("status") or "ok").strip().lower()
            if status != "ok":
                self._points[(int(batch), freq)] = None
                continue
            t = _num(profile_csv, lineno, row, "time_per_batch_s", True)
            peak = _num(profile_csv, lineno, row, "peak_power_w", True, zero_ok=True)
            mean = _num(profile_csv, lineno, row, "mean_power_w", False, zero_ok=True)
            assert t is not None and peak is not None
            self._points[(int(batch), freq)] = Measurement(t, peak, mean)
        if not self._points:
            raise DeviceError(
                "{}: no data rows, expected one row per operating point".format(profile_csv)
            )
        self._freqs = sorted(freqs)
        self.lock_log = []  # type: List[float]
        self.restores = 0
        self.locked_mhz = None  # type: Optional[float]
        self.batch_size = None  # type: Optional[int]

    def batch_sizes(self) -> List[int]:
        """Batch sizes present in the file (runnable or not), ascending."""
        return sorted(set(b for b, _ in self._points))

    def frequencies(self) -> List[float]:
        return list(self._freqs)

    def _match(self, freq_mhz: float) -> float:
        for f in self._freqs:
            if abs(f - float(freq_mhz)) <= 1e-6 * max(1.0, abs(f)):
                return f
        raise DeviceError(
            "{} MHz is not in {}; valid MHz: {}".format(
                freq_mhz, self.profile_csv, ", ".join("{:g}".format(f) for f in self._freqs)
            )
        )

    def lock(self, freq_mhz: float) -> None:
        self.lock_log.append(float(freq_mhz))
        self.locked_mhz = self._match(freq_mhz)

    def restore(self) -> None:
        if self.locked_mhz is not None:
            self.restores += 1
        self.locked_mhz = None

    def set_workload(self, batch_size: Optional[int]) -> None:
        """Tell the virtual device which batch size is running (None: idle)."""
        self.batch_size = None if batch_size is None else int(batch_size)

    def measure(self, batch_size: int, freq_mhz: float) -> Optional[Measurement]:
        """The recorded point, or None where it is missing or did not run (status != ok).

        Pure lookup: it neither locks nor changes the workload, so it can be handed straight to
        ``staircase_plan`` as its measuring function.
        """
        try:
            f = self._match(freq_mhz)
        except DeviceError:
            return None
        return self._points.get((int(batch_size), f))

    def read_power_w(self) -> Optional[float]:
        """Recorded mean power (peak if no mean) at (workload batch, locked frequency), or None.

        With a single-frequency profile the device counts as locked at it (nothing to choose).
        """
        freq = self.locked_mhz
        if freq is None and len(self._freqs) == 1:
            freq = self._freqs[0]
        if freq is None or self.batch_size is None:
            return None
        m = self._points.get((self.batch_size, freq))
        if m is None:
            return None
        return m.mean_power_w if m.mean_power_w is not None else m.peak_power_w

    def describe(self) -> Dict[str, object]:
        info = {"backend": self.name, "profile": self.profile_csv}  # type: Dict[str, object]
        if self._device:
            info["device"] = self._device
        return info


SPEC = BackendSpec(
    name="replay",
    factory=ReplayBackend,
    options=(
        Option(
            "profile_csv",
            str,
            "recorded profile CSV to replay",
            required=True,
            aliases=("replay-profile",),
        ),
    ),
    capabilities=Capabilities(measures_power=True, locks_clocks=True, torch_device="cpu"),
    summary="a virtual device answering from a recorded profile CSV",
)

"""The profiles' small "measurement noise": deterministic, keyed by a hash, never by a generator.

Separate because both the profile rows and the efficiency laws draw on it, and because its one
seed decides every noisy number in every generated file.
"""

from __future__ import annotations

import hashlib

#: Keys the deterministic noise; change it and every noisy number changes, nothing else does.
NOISE_SEED = 20240501


def unit_noise(*key: object) -> float:
    """Deterministic pseudo-noise in (-1, 1), triangular, keyed by ``NOISE_SEED`` and ``key``.

    A keyed hash rather than a seeded generator: each value depends only on its own key, so adding
    a device or a batch size never shifts the noise of the others, and no library release can
    change the stream.
    """
    text = ":".join([str(NOISE_SEED), *map(str, key)]).encode()
    digest = hashlib.blake2b(text, digest_size=16).digest()
    u1 = int.from_bytes(digest[:8], "big") / 2.0**64
    u2 = int.from_bytes(digest[8:], "big") / 2.0**64
    return u1 + u2 - 1.0


#: Relative noise amplitudes (half-widths). Timing jitter over a few mini-batches is ~1 %; the
#: GPU's activity varies by a few tenths of a percent between runs; the highest 1 s power sample
#: (INA3221, ~8-40 mW resolution) moves by about as much. Kept small enough that power stays
#: monotone in f and b and the calibration margins (a few tens of mW) hold.
TIME_NOISE = 0.008
DYN_POWER_NOISE = 0.004
PEAK_POWER_NOISE = 0.0015

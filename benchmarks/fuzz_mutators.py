"""Generic mutators: byte and line damage that any text or binary input can suffer.

Truncation, bit flips, a BOM, CRLF, binary and NUL bytes, invalid UTF-8, duplicated or deleted
lines, very long lines and bloated files, plus the ``HOSTILE`` cell values the format-specific
mutators draw from. :func:`mutate` combines a family's own mutators with these. Separate so
every fuzz target family draws from the same damage.
"""

from __future__ import annotations

import random

from benchmarks.fuzz_harness import MAX_INPUT

HOSTILE = [
    "", " ", "nan", "NaN", "inf", "-inf", "Infinity", "1e309", "-1e309", "1e-320", "5e-324",
    "0", "-0", "-1", "-0.5", "1e300", "123456789012345678901234567890", "abc", "0x1A", "1_000",
    "\uff11\uff12", "1e", ".", "+", "\x00", "true", "None", '"', '"quoted\nnewline"', "9" * 5000,
    "2.5", "1e-9", "\u22123", "1e-7", "3.0", "1,5", "  7  ", "\ufeff5",
]  # fmt: skip


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def m_truncate(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.randrange(len(data) + 1)]


def m_flip(rng: random.Random, data: bytes) -> bytes:
    if not data:
        return data
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)
    return bytes(b)


def m_bom(rng: random.Random, data: bytes) -> bytes:
    return b"\xef\xbb\xbf" + data


def m_crlf(rng: random.Random, data: bytes) -> bytes:
    return data.replace(b"\n", b"\r\n" if rng.random() < 0.7 else b"\r")


def m_binary(rng: random.Random, data: bytes) -> bytes:
    i = rng.randrange(len(data) + 1)
    return data[:i] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 64))) + data[i:]


def m_long_line(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    i = rng.randrange(len(lines))
    lines[i] = lines[i] + b"x" * rng.choice([10_000, 200_000, 2_000_000])
    return b"\n".join(lines)


def m_dup_line(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    i = rng.randrange(len(lines))
    return b"\n".join(lines[: i + 1] + [lines[i]] * rng.randint(1, 3) + lines[i + 1 :])


def m_del_line(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    del lines[rng.randrange(len(lines))]
    return b"\n".join(lines)


def m_many_rows(rng: random.Random, data: bytes) -> bytes:
    """Repeat the last row 1,000 or 20,000 times (a bloated or looping writer)."""
    lines = _lines(data.rstrip(b"\n"))
    times = min(rng.choice([1000, 20_000]), MAX_INPUT // (len(lines[-1]) + 1))
    return b"\n".join(lines + [lines[-1]] * times) + b"\n"


def m_nul(rng: random.Random, data: bytes) -> bytes:
    i = rng.randrange(len(data) + 1)
    return data[:i] + b"\x00" + data[i:]


def m_invalid_utf8(rng: random.Random, data: bytes) -> bytes:
    i = rng.randrange(len(data) + 1)
    return data[:i] + rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80"]) + data[i:]


GENERIC = [m_truncate, m_flip, m_bom, m_crlf, m_binary, m_dup_line, m_del_line, m_nul,
           m_invalid_utf8]  # fmt: skip
BIG = [
    m_long_line,
    m_many_rows,
]  # costly inputs (megabytes): one input in BIG_SHARE gets one of them
BIG_SHARE = 20


def mutate(rng: random.Random, data: bytes, specific: list) -> bytes:
    """One to three mutations; format-specific ones twice as likely as generic byte damage."""
    pool = [m for m in specific if m not in BIG] * 2 + GENERIC
    big = [m for m in specific if m in BIG] + BIG
    for _ in range(rng.randint(1, 3)):
        if data and len(data) < MAX_INPUT // 2:
            data = rng.choice(pool)(rng, data)
    if data and rng.randrange(BIG_SHARE) == 0:
        data = rng.choice(big)(rng, data)
    return data[:MAX_INPUT]

"""The one assertion every refusal test makes: ``powerfleet ARGV`` exits 2 with one stderr line.

Why a module: three test files had their own copy; a refusal means the same everywhere (one
line, no traceback, exit 2), so it is asserted the same way everywhere.
"""

from __future__ import annotations

from fleet.cli import main


def one_line(capsys, argv: list[str], *needles: str) -> str:
    """Run ``powerfleet ARGV`` in process: exit 2 and one stderr line holding every needle."""
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]

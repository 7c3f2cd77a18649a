"""Errors a user can act on. The CLI prints their message as one line and exits non-zero.

``InputError`` is the kernel's (``fleet.method.errors``), so a kernel refusal (a budget the
grammar of ``fleet.method.budget`` refuses) is caught wherever the host catches bad input.
"""

from fleet.method.errors import InputError

__all__ = ["InfeasibleError", "InputError"]


class InfeasibleError(InputError):
    """No operating point meets the power budget (the CLI exits 2, naming the lowest peak)."""

"""Errors a user can act on. The CLI prints their message as one line and exits non-zero."""


class InputError(ValueError):
    """Bad input: the message names the file, row and field, and what was expected."""


class InfeasibleError(InputError):
    """No operating point meets the power budget (the CLI exits 2, naming the lowest peak)."""

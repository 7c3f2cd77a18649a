"""Errors a user can act on. The CLI prints their message as one line and exits non-zero."""

from abc import ABCMeta

from fleet.method.selection import ChooseError


class InputError(ValueError, metaclass=ABCMeta):
    """Bad input: the message names the file, row and field, and what was expected.

    The kernel (``fleet.method``, Python 3.6, importing nothing of the project) raises its own
    one-line errors; they are registered here as input errors, so a host caller handles a
    kernel check (a deadline, a learning rate, a profile without power) exactly like its own.
    """


InputError.register(ChooseError)


class InfeasibleError(InputError):
    """No operating point meets the power budget (the CLI exits 2, naming the lowest peak)."""

"""The one base of every bad-input error, host and board alike.

Why in the kernel: the kernel refuses input itself (a budget, a schedule), and the host catches
bad input as ``fleet.common.errors.InputError`` everywhere (the CLI's exit 2, the client's
failed row). Defining the base here, and having ``fleet.common.errors`` re-export it, makes a
kernel refusal *be* the host's ``InputError``: no wrapper, no second message, no boundary code.
Python 3.6 compatible, stdlib only.
"""


class InputError(ValueError):
    """Bad input: the message is one line naming the file, row or field and what was expected."""

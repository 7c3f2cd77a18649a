"""A command ends with the status its ``main()`` returned, after a caught Ctrl-C too.

Why: CPython (3.8 and later) marks the process to end *killed by SIGINT* when a
KeyboardInterrupt leaves code run from a string by ``exec()`` or ``eval()`` (the way
``dataclasses`` and ``namedtuple`` build their methods), even when the program catches it
further up. Under ``python -m`` (how the agent and the tests start a command) the interpreter
honours that mark after it has finished, over the status ``sys.exit()`` gave. A Ctrl-C that
landed while a class was being built therefore ended ``python -m fleet simulate`` killed by
SIGINT instead of with its documented 130, though it had recorded the interruption and said so:
a caller reading the status could not tell a handled interruption from a crash. Each run of a
string starts by clearing the mark, so running an empty one just before exiting leaves the
status the command chose. (Python 3.6, the board's, has no such mark; the call costs nothing.)

Stdlib only, Python 3.6: ``python -m fleet`` and ``python -m fleet.agent`` both end here.
"""

import sys


def exit_with(code):
    # type: (int) -> None
    """``sys.exit(code)``, with CPython's "unhandled KeyboardInterrupt" mark cleared first."""
    exec("")  # each exec of a string resets the mark; this one raises nothing, so it stays clear
    sys.exit(code)

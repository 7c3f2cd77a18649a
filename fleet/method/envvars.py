"""The project's environment variables read into values; a bad value is one line naming it.

Why one place: a variable is typed once in a shell profile or a unit file and then read by a
command that may run far from where it was set (a board's agent, a coordinator's estimate). Read
loosely, a typo changes what happens without a word: ``POWERFLEET_OFFLINE=false`` once meant
offline, because anything but ``0`` did. So a switch takes the usual words and nothing else,
and a folder is checked for what a folder can be before anything is written into it. Every
refusal is an ``InputError`` (exit 2 on a command), the variable's name first.

Python 3.6 compatible, stdlib only (the agent on the board reads ``POWERFLEET_DATA``).
"""

import os

from fleet.method.errors import InputError

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


def env_flag(name: str) -> bool:
    """A switch: 1/true/yes/on or 0/false/no/off (any case, spaces ignored); unset or empty is
    off. Anything else is refused rather than guessed, since a guess is what made ``false`` on."""
    raw = os.environ.get(name, "")
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS or not word:
        return False
    raise InputError(
        "{}={!r}: expected 1/true/yes/on or 0/false/no/off (or unset)".format(name, raw)
    )


def env_folder(name: str, default: str) -> str:
    """A folder named by ``name`` (``~`` expanded), or ``default`` when unset or empty.

    The folder need not exist yet (a cache is created on first use), but it must be one that
    can: a ``~user`` that names nobody, or a path that is a file, is refused here, naming the
    variable, instead of failing later as a traceback or as every dataset "missing".
    """
    raw = os.environ.get(name, "")
    if not raw:
        return default
    path = os.path.expanduser(raw)
    if path.startswith("~"):  # expanduser leaves a ~user it cannot resolve as it is
        user = path.split(os.sep, 1)[0]
        raise InputError(
            "{}={!r}: cannot expand {} (no such user or home folder); expected a folder "
            "path".format(name, raw, user)
        )
    if os.path.exists(path) and not os.path.isdir(path):
        raise InputError(
            "{}={!r}: is a file, not a folder; expected a folder path".format(name, raw)
        )
    return path

"""What every preparation step shares: the error it raises and the progress callback it reports to.

Why separate: the fetchers (``canonical``, ``debian``, ``pypi``), the builders and the driver
(``fleet.data.prepare``) all raise :class:`PrepareError` and call a ``Report``; a module of its
own lets them depend on it and not on one another.
"""

from __future__ import annotations

from collections.abc import Callable

from fleet.common.errors import InputError

Report = Callable[[str, float], None]  # (what is happening, fraction done 0..1)


class PrepareError(InputError):
    """A dataset could not be fetched or converted; one line naming it and the failed step."""

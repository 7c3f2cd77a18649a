"""The canonical route: a dataset's upstream URL, tried first and only where the machine is online.

Why separate: the network probe (proxy, DNS with a hard time limit, ``$POWERFLEET_OFFLINE``) must
never hang a prepare on a machine that reaches only package registries; it is the one place
that opens a URL.
"""

from __future__ import annotations

import shutil
import socket
import threading
import urllib.parse
import urllib.request
from pathlib import Path

from fleet.data.step import Report
from fleet.method.envvars import env_flag

CANONICAL_TIMEOUT_S = 10.0  # per socket operation; DNS is probed separately with a 3 s limit
OFFLINE_ENV = "POWERFLEET_OFFLINE"  # 1/true/yes/on skips the canonical URLs


def offline() -> bool:
    """Whether ``$POWERFLEET_OFFLINE`` says to skip the canonical URLs; a value that is not a
    switch word is refused (``fleet.method.envvars.env_flag``: ``false`` is off, not on)."""
    return env_flag(OFFLINE_ENV)


def try_url(url: str, dest: Path, report: Report, dataset: str, fraction: float) -> bool:
    """Download ``url`` to ``dest`` if the machine is online; False (never a hang) otherwise."""
    if offline():
        return False
    host = urllib.parse.urlparse(url).hostname or ""
    if not _has_proxy(url) and not _resolves(host):
        return False
    report(f"downloading {url.rsplit('/', 1)[-1]}", fraction)
    try:
        with (
            urllib.request.urlopen(url, timeout=CANONICAL_TIMEOUT_S) as resp,
            open(dest, "wb") as f,
        ):
            shutil.copyfileobj(resp, f, 1 << 20)
        return True
    except (OSError, ValueError) as exc:  # URLError, HTTPError, timeouts are OSErrors
        report(f"{url} unreachable ({exc}); falling back to the package", fraction)
        return False


def _has_proxy(url: str) -> bool:
    return bool(urllib.request.getproxies().get(urllib.parse.urlparse(url).scheme))


def _resolves(host: str, timeout: float = 3.0) -> bool:
    """DNS lookup with a hard time limit (getaddrinfo itself ignores socket timeouts)."""
    ok: list[bool] = []

    def probe() -> None:
        try:
            socket.getaddrinfo(host, 443)
            ok.append(True)
        except OSError:
            pass

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout)
    return bool(ok)

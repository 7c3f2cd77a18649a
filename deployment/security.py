"""What the deployment trusts: loopback by resolution, SuperNode keys, private directories.

Why a module of its own: these are the checks between a hand-typed flag and a process that
listens on or connects over a network, so they are kept small, free of Flower imports, and
unit-tested against the real resolver and the real filesystem (docs/architecture.md,
"Deployment security").

- TLS is the default: the SuperLink's three files (``Tls``: CA certificate, certificate, key)
  are checked to exist before it starts; clients need only the CA certificate.
- Plaintext (``--insecure``) is allowed only when the address *resolves* to loopback addresses
  and nothing else; Flower is then handed the resolved IP literal, so a later, different answer
  from the resolver cannot move the plaintext connection off the host.
- SuperNode authentication in Flower 1.41: the SuperLink runs with ``--enable-supernode-auth``
  (which Flower allows only with TLS) and every SuperNode's public key is registered through the
  Control API (``flwr supernode register KEY.pub``); a SuperNode proves itself with
  ``--auth-supernode-private-key``. Keys are OpenSSH ECDSA keys on a NIST curve
  (``ssh-keygen -t ecdsa -b 384``); they are checked here so a wrong file fails with one line
  before any process starts.
- Each coordinator/device run gets a fresh 0700 directory (``tempfile.mkdtemp``) inside a base
  directory this user owns and nobody else can write: Flower's ``FLWR_HOME`` and ``TMPDIR`` for
  that run, never a shared, predictable path.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from fleet.common.errors import InputError

# --------------------------------------------------------------------------- TLS files


@dataclass(frozen=True)
class Tls:
    """TLS files. The SuperLink needs all three; clients need only ``ca_certfile``."""

    ca_certfile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None

    def check_server(self) -> None:
        missing = [
            flag
            for flag, value in (
                ("--ssl-ca-certfile", self.ca_certfile),
                ("--ssl-certfile", self.certfile),
                ("--ssl-keyfile", self.keyfile),
            )
            if not value
        ]
        if missing:
            raise InputError(f"TLS needs {', '.join(missing)} as well")
        for value in (self.ca_certfile, self.certfile, self.keyfile):
            if not Path(str(value)).is_file():
                raise InputError(f"TLS file not found: {value}")


# --------------------------------------------------------------------------- loopback


def loopback_ip(host: str) -> str | None:
    """The loopback IP ``host`` resolves to, or None if any of its addresses is not loopback or
    it does not resolve. IPv4 is preferred when a name has both (``localhost``)."""
    if not host:
        return None
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None
    ips = []
    for info in infos:
        try:
            ips.append(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]))
        except ValueError:
            return None
    if not ips or not all(ip.is_loopback for ip in ips):
        return None
    v4 = [ip for ip in ips if ip.version == 4]
    return str((v4 or ips)[0])


def plaintext_host(host: str, flag: str = "--insecure") -> str:
    """The loopback IP to use without TLS, or InputError (one line) when ``host`` is not
    loopback-only by resolution."""
    ip = loopback_ip(host)
    if ip is None:
        raise InputError(
            f"{flag}: plaintext is allowed on loopback only, and {host!r} does not resolve to "
            "loopback addresses only; use TLS for any other address"
        )
    return ip


def join_host_port(host: str, port: int) -> str:
    """HOST:PORT with an IPv6 literal in brackets, as Flower's --superlink expects."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# --------------------------------------------------------------------------- SuperNode keys


def _check_ec(key: object, path: Path, what: str) -> None:
    from cryptography.hazmat.primitives.asymmetric import ec

    nist = ("secp256r1", "secp384r1", "secp521r1")
    if (
        not isinstance(key, (ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey))
        or key.curve.name not in nist
    ):
        raise InputError(
            f"{path}: expected an OpenSSH ECDSA {what} on a NIST curve "
            "(ssh-keygen -t ecdsa -b 384 -N '' -f KEY)"
        )


def check_public_key(path: str | Path) -> Path:
    """An OpenSSH ECDSA public key file (``KEY.pub``), as ``flwr supernode register`` takes it."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.serialization import load_ssh_public_key

    path = Path(path)
    try:
        data = path.read_bytes()[:16384]
    except OSError as exc:
        raise InputError(f"{path}: cannot read the SuperNode public key ({exc.strerror})") from None
    try:
        key = load_ssh_public_key(data.strip())
    except (ValueError, UnsupportedAlgorithm):
        key = None
    _check_ec(key, path, "public key")
    return path.resolve()


def public_keys(paths: list[str | Path]) -> list[Path]:
    """Every authorised key: each path a ``.pub`` file or a directory of ``*.pub`` files;
    duplicates (the same key twice) are refused, since Flower registers a key once."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(path.glob("*.pub"))
            if not found:
                raise InputError(f"{path}: no *.pub SuperNode public keys in this directory")
            files += found
        else:
            files.append(path)
    seen: dict[bytes, Path] = {}
    out = []
    for file in files:
        checked = check_public_key(file)
        body = b" ".join(checked.read_bytes().split()[:2])
        if body in seen:
            raise InputError(f"{file}: the same public key as {seen[body]}")
        seen[body] = file
        out.append(checked)
    return out


def check_private_key(path: str | Path) -> Path:
    """The SuperNode's OpenSSH ECDSA private key: readable, unencrypted, not readable by group
    or others (as ssh insists)."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.serialization import load_ssh_private_key

    path = Path(path)
    try:
        mode = path.stat().st_mode
        data = path.read_bytes()[:65536]
    except OSError as exc:
        why = exc.strerror
        raise InputError(f"{path}: cannot read the SuperNode private key ({why})") from None
    if mode & 0o077:
        raise InputError(
            f"{path}: the private key is readable by group or others (mode "
            f"{stat.S_IMODE(mode):o}); chmod 600 it"
        )
    try:
        key = load_ssh_private_key(data, None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        key = None
    _check_ec(key, path, "private key without a passphrase")
    return path.resolve()


# --------------------------------------------------------------------------- directories


def state_base() -> Path:
    """The user's state directory for powerfleet (``$XDG_STATE_HOME/powerfleet``, default
    ``~/.local/state/powerfleet``)."""
    root = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(root) / "powerfleet"


def owned_dir(path: str | Path) -> Path:
    """Create ``path`` (0700) if missing; refuse one that is a symlink, not this user's, or
    writable by group or others."""
    path = Path(path).expanduser()
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.lstat()
    except OSError as exc:
        raise InputError(f"{path}: cannot create the working directory ({exc.strerror})") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise InputError(f"{path}: the working directory must be a real directory, not a link")
    if st.st_uid != os.getuid():
        raise InputError(f"{path}: the working directory belongs to uid {st.st_uid}, not to you")
    if st.st_mode & 0o022:
        raise InputError(
            f"{path}: the working directory is writable by group or others "
            f"(mode {stat.S_IMODE(st.st_mode):o}); chmod 700 it"
        )
    return path.resolve()


def run_dir(base: str | Path, role: str) -> Path:
    """A fresh 0700 directory for one run inside the owned ``base`` (``<role>-<random>``)."""
    return Path(tempfile.mkdtemp(prefix=f"{role}-", dir=str(owned_dir(base))))

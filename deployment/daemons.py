"""The Flower daemons' command lines: ``flower-superlink``, ``flower-supernode`` and node config.

Why a module of its own: turning the user's flags into a daemon's argv is where TLS versus
plaintext is decided (TLS by default, plaintext only with ``insecure`` on an address that
resolves to loopback, where Flower gets the resolved IP literal), where SuperNode
authentication is switched on, and where a fleet entry becomes ``--node-config`` TOML; each
refusal is one line (``InputError``) before any process starts. The checks themselves live in
``security.py``; starting the processes in ``processes.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from deployment import security
from deployment.processes import flower_bin
from deployment.security import Tls
from fleet.common.errors import InputError


def split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise InputError(f"address {address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def serve_host(host: str, tls: Tls | None, insecure: bool) -> str:
    """The host the SuperLink binds: as given with TLS, the resolved loopback IP with
    ``insecure``; InputError (one line) for every other combination."""
    if tls is not None and insecure:
        raise InputError("--insecure and the --ssl-* TLS files exclude each other: pick one")
    if tls is None and not insecure:
        raise InputError(
            f"refusing to serve on {host} without TLS: pass --ssl-certfile, --ssl-keyfile and "
            "--ssl-ca-certfile, or --insecure on a loopback address"
        )
    return security.plaintext_host(host) if insecure else host


def superlink_command(
    host: str,
    port: int,
    tls: Tls | None = None,
    *,
    insecure: bool = False,
    supernode_auth: bool = False,
    database: str | Path | None = None,
) -> list[str]:
    """``flower-superlink`` on host:port: TLS, or plaintext with ``insecure`` on an address
    that resolves to loopback only. ``supernode_auth`` (needs TLS, as Flower insists) admits
    only SuperNodes whose public key is registered (``register_supernodes``). ``database``: a
    SQLite file for the SuperLink's state (runs, nodes, messages; made absolute, since the
    daemon runs in its private directory), so a SuperLink restarted on the same file knows the
    runs and nodes it had; None keeps the state in memory (lost when the process ends)."""
    bind = serve_host(host, tls, insecure)
    argv = [flower_bin("flower-superlink"), "--host", bind, "--port", str(port)]
    argv.append("--disable-runtime-dependency-installation")
    if database is not None:
        if not str(database).strip():
            raise InputError("--database: empty path (leave it out to keep the state in memory)")
        argv += ["--database", str(Path(database).resolve())]
    if tls is None:
        if supernode_auth:
            raise InputError("SuperNode authentication needs TLS: pass the --ssl-* files too")
        return argv + ["--insecure"]
    tls.check_server()
    if supernode_auth:
        argv.append("--enable-supernode-auth")
    return argv + [  # absolute: the daemon runs in its private directory
        "--ssl-ca-certfile",
        str(Path(str(tls.ca_certfile)).resolve()),
        "--ssl-certfile",
        str(Path(str(tls.certfile)).resolve()),
        "--ssl-keyfile",
        str(Path(str(tls.keyfile)).resolve()),
    ]


def toml_value(value: object) -> str:
    """One TOML value (what --node-config and -c expect): strings quoted, numbers as is."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))  # a JSON string is a valid TOML basic string


def format_node_config(config: dict[str, object]) -> str:
    """--node-config: space-separated key=TOML-value pairs."""
    return " ".join(f"{k}={toml_value(v)}" for k, v in config.items())


def supernode_command(
    superlink: str,
    port: int,
    node_config: dict[str, object],
    root_certificates: str | None = None,
    *,
    insecure: bool = False,
    auth_private_key: str | None = None,
) -> list[str]:
    """``flower-supernode`` connecting to ``superlink``; its local Runtime API on 127.0.0.1:port.

    TLS (``root_certificates``, the SuperLink's CA) or ``insecure`` to an address that resolves
    to loopback only (then connecting to the resolved IP). ``auth_private_key``: this node's
    OpenSSH ECDSA key for SuperNode authentication (TLS only)."""
    host, link_port = split_address(superlink)
    if root_certificates and insecure:
        raise InputError("--insecure and --root-certificates exclude each other: pick one")
    if not root_certificates and not insecure:
        raise InputError(
            f"refusing to connect to {host} without TLS: pass --root-certificates CA.pem "
            "(the SuperLink's CA certificate), or --insecure to a loopback address"
        )
    if insecure:
        if auth_private_key:
            raise InputError("--auth-private-key needs TLS: pass --root-certificates instead")
        superlink = security.join_host_port(security.plaintext_host(host), link_port)
    flower_bin("flower-supernode")  # installed, or one line saying it is not
    argv = [
        sys.executable,  # flower-supernode, which exits when its connection ends
        "-m",
        "deployment.supernode",
        "--superlink",
        superlink,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--node-config",
        format_node_config(node_config),
    ]
    if insecure:
        return argv + ["--insecure"]
    if not Path(str(root_certificates)).is_file():
        raise InputError(f"--root-certificates: file not found: {root_certificates}")
    argv += ["--root-certificates", str(Path(str(root_certificates)).resolve())]
    if auth_private_key:
        argv += ["--auth-supernode-private-key", str(security.check_private_key(auth_private_key))]
    return argv


def device_node_config(
    spec_config: dict[str, object], client: str = "replay", **hardware: object
) -> dict[str, object]:
    """The node config for `powerfleet device`: the fleet entry's, plus client and agent keys."""
    config = dict(spec_config)
    if client not in ("replay", "hardware"):
        raise InputError(f"--client must be replay or hardware, got {client!r}")
    config["client"] = client
    for key, value in hardware.items():
        if value not in (None, ""):
            config[key.replace("_", "-")] = value
    return config

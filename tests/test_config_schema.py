"""One schema for every configuration table: typed [run] settings, unknown keys refused with the
file, line, key and closest known key, and the generated reference page."""

from __future__ import annotations

import dataclasses
import json
import tomllib
from pathlib import Path

import pytest
from flwr.app import RecordDict

from clients import records
from clients.client_app import segment_round
from fleet.common.errors import InputError
from fleet.config.app_keys import RUN_CONFIG_KEYS, check_node_config
from fleet.config.fleetfile import RunSettings, load_fleet, run_value
from fleet.config.locate import key_line
from fleet.config.reference import reference_markdown
from fleet.config.schema import RUN_KEYS
from fleet.core.efficiency import Efficiency
from strategies.server_app import settings_from_run_config
from tests.conftest import ROOT, run_cli

DEFAULT = ROOT / "simulations" / "fleets" / "default.toml"


def _default_fleet(tmp_path: Path, edit) -> Path:  # noqa: ANN001
    """The default fleet, with absolute paths, edited by ``edit(text) -> text``."""
    text = DEFAULT.read_text().replace('"../', f'"{DEFAULT.parent.parent}/')
    path = tmp_path / "fleet.toml"
    path.write_text(edit(text))
    return path


def _line_of(path: Path, needle: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def _refused_by_cli(path: Path) -> str:
    r = run_cli("simulate", "--fleet", str(path), "--engine", "direct", "--run-dir",
                str(path.parent / "run"))  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    err = r.stderr.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert not (path.parent / "run" / "report.json").exists()
    return err


def test_misspelt_run_key_is_refused_by_the_cli_with_file_line_and_closest_key(tmp_path):
    path = _default_fleet(
        tmp_path, lambda t: t.replace('objective = "time"', 'objectve = "deadline"')
    )
    err = _refused_by_cli(path)
    line = _line_of(path, "objectve")
    assert f"{path}:{line}: [run]: unknown key 'objectve' (did you mean 'objective'?)" in err


def test_misspelt_device_key_beside_the_right_one_is_refused_by_the_cli(tmp_path):
    def edit(text: str) -> str:
        head, sep, rest = text.partition("budget_w = ")
        return head + "budjet_w = 7.0\n" + sep + rest  # the first device: both keys

    path = _default_fleet(tmp_path, edit)
    err = _refused_by_cli(path)
    line = _line_of(path, "budjet_w")
    assert f"{path}:{line}: device #1 (nano-4w5): unknown key 'budjet_w'" in err
    assert "(did you mean 'budget_w'?)" in err


def test_unknown_table_and_wrong_type_name_file_line_and_key(tmp_path):
    path = _default_fleet(tmp_path, lambda t: t + "\n[runn]\nx = 1\n")
    with pytest.raises(
        InputError, match=r"fleet.toml:\d+: unknown key 'runn' \(did you mean 'run'"
    ):
        load_fleet(path)
    path = _default_fleet(tmp_path, lambda t: t.replace("[run]\n", "[run]\nmax_samples = -4\n"))
    with pytest.raises(InputError) as info:
        load_fleet(path)
    assert str(info.value) == (
        f"{path}:{_line_of(path, 'max_samples')}: [run]: field 'max_samples' must be an "
        "integer in [1, 2**40], got -4"
    )


# A value for each setting beyond the first eleven, none of them its default.
SETTINGS = {
    "deadline_s": (4380.5, "4380.5"),
    "ship_weights": (False, "false"),
    "weights": ("w.pft", '"w.pft"'),
    "data_dir": ("/data", '"/data"'),
    "learn_efficiency": ("device", '"device"'),
    "eval_every_samples": (256, "256"),
    "max_samples": (80000, "80000"),
    "guard_window_s": (0.5, "0.5"),
    "efficiency_store": ("effs", '"effs"'),
    "profile_store": ("profs", '"profs"'),
    "input_shape": ("1x28x28", '"1x28x28"'),
    "ray_address": ("127.0.0.1:6379", '"127.0.0.1:6379"'),
    "ray_device_cpus": (2, "2"),
    "ray_device_gpus": (0.25, "0.25"),
}


def test_every_typed_setting_reads_back_from_toml_and_over_the_wire(tmp_path):
    lines = "".join(f"{k} = {toml}\n" for k, (_, toml) in SETTINGS.items())
    (tmp_path / "w.pft").write_bytes(b"")  # the weights must be there when the file is read
    path = _default_fleet(  # and deadline_s means something with the deadline objective only
        tmp_path,
        lambda t: t.replace("[run]\n", "[run]\n" + lines).replace(
            'objective = "time"', 'objective = "deadline"'
        ),
    )
    fleet = load_fleet(path)
    for key, (value, _) in SETTINGS.items():
        got = getattr(fleet.run, key)
        assert got == value and type(got) is type(value), key
    assert run_value(path, "profile_store") == "profs"
    # the train instruction carries them by name and rebuilds the same typed object
    ins = records.TrainInstruction(Efficiency({32: 100.0}, source="e.csv"), fleet.run)
    cfg = records.encode_instruction(ins)
    assert json.loads(str(cfg[records.RUN_SETTINGS])) == {k: v for k, (v, _) in SETTINGS.items()}
    assert records.decode_instruction(cfg).run == fleet.run
    # defaults when absent
    plain = load_fleet(DEFAULT).run
    for key in SETTINGS:
        (decl,) = [k for k in RUN_KEYS if k.name == key]
        assert getattr(plain, key) == decl.default, key


def test_run_settings_are_exactly_the_schema():
    fields = dataclasses.fields(RunSettings)
    assert [f.name for f in fields] == [k.name for k in RUN_KEYS]
    for f, k in zip(fields, RUN_KEYS, strict=True):
        if not k.required and k.name != "name":
            assert f.default == k.default, k.name
    assert set(SETTINGS) == {k.name for k in RUN_KEYS if not k.wire}
    # every key travels one way: its own wire key (named once, in the schema) or run-settings
    fleet = load_fleet(DEFAULT)
    cfg = records.encode_instruction(records.TrainInstruction(Efficiency({32: 100.0}), fleet.run))
    wired = [k.wire for k in RUN_KEYS if k.wire]
    assert len(set(wired)) == len(wired) and set(wired) <= set(cfg.keys())
    assert set(json.loads(str(cfg[records.RUN_SETTINGS]))) <= {
        k.name for k in RUN_KEYS if not k.wire
    }


def test_committed_reference_page_is_the_generated_one():
    page = (ROOT / "docs" / "fleet-file.md").read_text()
    assert page == reference_markdown(), (
        "regenerate: python -m fleet.config.reference > docs/fleet-file.md"
    )
    for key in RUN_KEYS:
        assert f"| `{key.name}` |" in page


def test_node_config_unknown_key_is_an_error_row_naming_the_closest_key():
    with pytest.raises(InputError, match=r"node config: unknown key 'pacee' \(did you mean 'pace'"):
        check_node_config({"partition-id": 0, "pacee": 2.0})
    check_node_config({"partition-id": 0, "num-partitions": 8, "pace": 2.0, "sysfs-root": "/x"})
    reply = segment_round({"partition-id": 0, "work_dir": "/tmp"}, RecordDict({}))
    row = records.decode_reply(
        reply.metric_records[records.METRICS], reply.config_records[records.REPORT]
    )
    assert row["status"] == "error"
    assert "unknown key 'work_dir' (did you mean 'work-dir'?)" in str(row["message"])


def test_run_config_unknown_key_refused_and_pyproject_keys_are_the_schema():
    with pytest.raises(InputError, match=r"unknown key 'segmnt-s' \(did you mean 'segment-s'"):
        settings_from_run_config({"fleet-path": "/f.toml", "segmnt-s": 0})
    for pyproject in (
        ROOT / "pyproject.toml",
        ROOT / "deployment" / "flower_app" / "pyproject.toml",
    ):
        config = tomllib.loads(pyproject.read_text())["tool"]["flwr"]["app"]["config"]
        assert list(config) == [k.name for k in RUN_CONFIG_KEYS], pyproject
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    assert root == {k.name: k.default for k in RUN_CONFIG_KEYS}


def test_key_line_finds_keys_in_their_own_table():
    text = '[run]\nname = "a"\n\n[[devices]]\nname = "x"\n\n[[devices]]\n"name" = "y"\n'
    assert key_line(text, "run", 0, "name") == 2
    assert key_line(text, "devices", 0, "name") == 5
    assert key_line(text, "devices", 1, "name") == 8
    assert key_line(text, "devices", 2, "name") is None
    assert key_line(text, None, 0, "devices") == 4

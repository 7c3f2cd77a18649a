"""The Grafana dashboard queries only metrics the coordinator really writes.

Why: a dashboard is read when something is wrong; a panel over a metric that was renamed or
never existed shows "No data", which reads as "nothing happening". Every PromQL expression of
every panel (and of the template variables) is taken apart here, every metric name in it is
collected, and each must be in the ``metrics.prom`` a real ``powerfleet simulate`` run wrote.
The provisioning files must point Grafana at the dashboard and name the datasource it uses.
"""

import json
import re

import yaml

from tests.conftest import ROOT, run_cli

GRAFANA = ROOT / "deployment" / "grafana"
DASHBOARD = GRAFANA / "powerfleet.json"

# PromQL words that are not metric names (keywords, aggregation modifiers, set operators).
KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "and",
    "or", "unless", "atan2", "inf", "nan",
}  # fmt: skip
IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """Every metric name in a PromQL expression: identifiers outside strings, label matchers,
    range selectors and grouping clauses, not called as functions, not keywords or numbers."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings (label values, regexes)
    e = re.sub(r"\{[^}]*\}", " ", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)  # range and subquery selectors
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    names = set()
    for m in IDENT.finditer(e):
        rest = e[m.end() :].lstrip()
        if rest.startswith("(") or m.group() in KEYWORDS:
            continue  # a function call or a keyword
        if m.start() > 0 and (e[m.start() - 1].isdigit() or e[m.start() - 1] == "."):
            continue  # the exponent or unit of a number (1e6, 5m)
        names.add(m.group())
    return names


def _label_values_metric(query: str) -> set[str]:
    """``label_values(METRIC{...}, label)``: the metric a template variable reads."""
    m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", query)
    assert m, f"template query {query!r}: expected label_values(metric, label)"
    return metric_names(m.group(1))


def _written_metrics(tmp_path) -> set[str]:
    run = tmp_path / "run"
    fleet = ROOT / "simulations" / "fleets" / "default.toml"
    r = run_cli("simulate", "--fleet", str(fleet), "--engine", "direct", "--run-dir", str(run))
    assert r.returncode == 0, r.stderr
    text = (run / "metrics.prom").read_text()
    return {line.split("{")[0].split()[0] for line in text.splitlines() if line[:1].isalpha()}


def test_metric_names_parser_on_known_expressions():
    assert metric_names('sum by (status) (powerfleet_device_status{run=~"$run"})') == {
        "powerfleet_device_status"
    }
    assert metric_names('time() - a_seconds{x="b c"} / rate(b_total[5m]) * 1e6') == {
        "a_seconds",
        "b_total",
    }
    assert metric_names("x == 1 and on(device) y") == {"x", "y"}


def test_every_metric_the_dashboard_queries_exists_in_a_real_metrics_prom(tmp_path):
    written = _written_metrics(tmp_path)
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["panels"]
    queried: dict[str, set[str]] = {}
    for panel in dash["panels"]:
        assert panel.get("targets"), f"panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            assert names, f"panel {panel['title']!r}: no metric in {target['expr']!r}"
            queried.setdefault(panel["title"], set()).update(names)
    for var in dash["templating"]["list"]:
        queried[f"variable {var['name']}"] = _label_values_metric(var["query"]["query"])
    missing = {t: n - written for t, n in queried.items() if n - written}
    assert not missing, f"not in metrics.prom: {missing}"
    used = set().union(*queried.values())
    # what the brief asks the dashboard to show: power vs budget, progress, ETA, energy, status
    for name in (
        "powerfleet_device_power_watts", "powerfleet_device_budget_watts",
        "powerfleet_device_done_ratio", "powerfleet_device_eta_seconds",
        "powerfleet_device_energy_joules_total", "powerfleet_device_status",
    ):  # fmt: skip
        assert name in used, name


def test_provisioning_names_the_dashboards_datasource_and_loads_its_folder():
    dash = json.loads(DASHBOARD.read_text())
    uids = {p["datasource"]["uid"] for p in dash["panels"]}
    uids |= {t["datasource"]["uid"] for p in dash["panels"] for t in p["targets"]}
    uids |= {v["datasource"]["uid"] for v in dash["templating"]["list"]}
    sources = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yaml").read_text())
    (source,) = sources["datasources"]
    assert source["type"] == "prometheus" and uids == {source["uid"]}
    boards = yaml.safe_load((GRAFANA / "provisioning/dashboards/powerfleet.yaml").read_text())
    (provider,) = boards["providers"]
    assert provider["type"] == "file" and provider["options"]["path"]
    assert sources["apiVersion"] == boards["apiVersion"] == 1

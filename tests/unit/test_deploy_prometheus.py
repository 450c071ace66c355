"""The shipped alert rules and Grafana dashboard (deploy/): checked and unit-tested by Debian's
``promtool``, and every metric they name is one the code registers.

``promtool`` comes with Debian's ``prometheus`` package (``.ci/run`` installs it). Without it the
tests that run it are skipped with that reason, and fail instead under ``CI=true``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from reliable_kafka.ops.metrics import METRICS, TOPOLOGY_METRICS, component_registry

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy/prometheus/reliable-kafka-rules.yml"
RULE_TESTS = ROOT / "deploy/prometheus/reliable-kafka-rules.test.yml"
DASHBOARD = ROOT / "deploy/grafana/reliable-kafka.json"
OPERATIONS = ROOT / "docs/operations.md"
ALERTS = (
    "ReliableKafkaDeadLetterFlood",
    "ReliableKafkaStall",
    "ReliableKafkaComponentDown",
    "ReliableKafkaTargetDown",
    "ReliableKafkaWaitingForKafka",
    "ReliableKafkaCompletionLatencyHigh",
    "ReliableKafkaLagGrowing",
)

KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"}


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        message = "promtool is not installed (Debian: apt-get install prometheus; .ci/run does it)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def _run(*args: str, cwd: Path) -> str:
    done = subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"promtool {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (what is not a function, keyword or label)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings (label values)
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    names = set()
    for match in re.finditer(r"(?<![\w.$])[a-zA-Z_:][\w:]*", text):
        if match.group() in KEYWORDS or text[match.end() :].lstrip().startswith("("):
            continue  # a keyword, or a function / aggregation
        names.add(match.group())
    return names


def rule_exprs(text: str) -> dict[str, str]:
    """alert name -> expression, read from the rules file (a block scalar or one line)."""
    exprs, alert, lines = {}, None, text.splitlines()
    for i, line in enumerate(lines):
        if m := re.match(r"\s*- alert: (\S+)", line):
            alert = m.group(1)
        elif (m := re.match(r"(\s*)expr: (.*)", line)) and alert is not None:
            if m.group(2).strip() != "|":
                exprs[alert] = m.group(2)
                continue
            indent, body = len(m.group(1)), []
            for following in lines[i + 1 :]:
                if following.strip() and len(following) - len(following.lstrip()) <= indent:
                    break
                body.append(following)
            exprs[alert] = "\n".join(body)
    return exprs


def registered_names() -> set[str]:
    """Every sample name our registries can serve, and Prometheus's own ``up``."""
    names = {"up"}
    for name, (kind, *_rest) in {**METRICS, **TOPOLOGY_METRICS}.items():
        names.add(name)
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    text = generate_latest(component_registry()).decode()  # process, platform, GC collectors
    names |= {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    return names


def dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = []

    def walk(panels):
        for panel in panels:
            exprs.extend(t["expr"] for t in panel.get("targets", []))
            walk(panel.get("panels", []))

    walk(dashboard["panels"])
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict) and (m := re.match(r"label_values\((\w+)", query["query"])):
            exprs.append(m.group(1))
    return exprs


def test_promtool_checks_the_rules():
    out = _run("check", "rules", str(RULES), cwd=RULES.parent)
    assert f"SUCCESS: {len(ALERTS)} rules found" in out


def test_promtool_unit_tests_of_every_rule_pass():
    _run("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)


def test_every_rule_is_unit_tested_firing_and_silent():
    tests = RULE_TESTS.read_text()
    for alert in ALERTS:
        blocks = re.findall(rf"alertname: {alert}\n\s+exp_alerts:(.*?)(?=\n\s+- eval_time|\n\s*#|\n\n|\Z)", tests, re.S)
        fires = [b for b in blocks if "exp_labels" in b]
        silent = [b for b in blocks if b.strip().startswith("[]")]
        assert fires and silent, f"{alert}: needs a case where it fires and one where it does not"


def test_every_rule_has_a_for_a_severity_a_summary_and_a_runbook_in_the_docs():
    text = RULES.read_text()
    assert set(rule_exprs(text)) == set(ALERTS)
    docs = OPERATIONS.read_text()
    for block in text.split("- alert: ")[1:]:
        name = block.split()[0]
        assert re.search(r"\n\s+for: \d+[smh]\n", block), f"{name}: no for:"
        assert re.search(r"severity: (critical|warning)\n", block), f"{name}: no severity"
        assert "summary:" in block, f"{name}: no summary"
        anchor = re.search(r"runbook: \"docs/operations\.md#([\w-]+)", block)
        assert anchor, f"{name}: no runbook pointing at docs/operations.md"
        assert f'id="{anchor.group(1)}"' in docs, f"{name}: docs/operations.md has no anchor {anchor.group(1)}"


def test_the_rules_name_only_metrics_the_code_registers():
    known = registered_names()
    for alert, expr in rule_exprs(RULES.read_text()).items():
        assert metric_names(expr), f"{alert}: no metric found in {expr!r}"
        assert metric_names(expr) <= known, f"{alert}: unknown metrics {metric_names(expr) - known}"


def test_the_dashboard_is_json_and_names_only_metrics_the_code_registers():
    known = registered_names()
    exprs = dashboard_exprs()
    assert len(exprs) >= 20
    for expr in exprs:
        assert metric_names(expr), f"no metric found in {expr!r}"
        assert metric_names(expr) <= known, f"unknown metrics {metric_names(expr) - known} in {expr!r}"
    # and the other way: every documented metric is on the dashboard
    shown = set().union(*map(metric_names, exprs))
    missing = {
        name
        for name, (kind, *_rest) in {**METRICS, **TOPOLOGY_METRICS}.items()
        if name not in shown and not (kind == "histogram" and f"{name}_bucket" in shown)
    }
    off_the_dashboard = {
        "rk_component_start_time_seconds",
        "rk_component_waiting_for_kafka",  # an alert: 1 only before a component starts
        "rk_records_read_total",
        "rk_tuples_emitted_total",
        "rk_bolt_untracked_tuples_total",
        "rk_topology_quarantined_records",
        "rk_topology_dead_letter_records",
    }
    assert missing <= off_the_dashboard


def test_the_dashboard_queries_are_valid_promql(tmp_path):
    """Each query, with Grafana's variables filled in, as a recording rule that promtool checks."""
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for i, expr in enumerate(dashboard_exprs()):
        concrete = expr.replace("$__rate_interval", "1m").replace("$topology", ".*")
        lines += [f"      - record: dashboard:query_{i}", f"        expr: {json.dumps(concrete)}"]
    rules = tmp_path / "dashboard-rules.yml"
    rules.write_text("\n".join(lines) + "\n")
    _run("check", "rules", str(rules), cwd=tmp_path)


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (topology, le) (rate(rk_x_bucket{a="b"}[5m]))', {"rk_x_bucket"}),
        ("up == 0 and on (job, instance) max_over_time(rk_info[1h]) == 1", {"up", "rk_info"}),
        ("histogram_quantile(0.99, x) > 10", {"x"}),
        ('a / (b{c="rate(d)"} + e)', {"a", "b", "e"}),
    ],
)
def test_metric_names_reads_what_promql_reads(expr, names):
    assert metric_names(expr) == names

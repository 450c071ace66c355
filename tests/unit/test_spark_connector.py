"""Spark's Kafka connector follows the installed PySpark (reliable_kafka.spark.connector): the
coordinates per Spark release, and the token provider's fallback when Maven cannot get the
connector's own, with a fake Maven (no network)."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from reliable_kafka.errors import ConfigError, JarResolutionError
from reliable_kafka.spark import connector
from reliable_kafka.spark.connector import connector_artifact, connector_jars, dependency_candidates, spark_release

# A fake mvn: `dependency:copy -Dartifact=G:A:V` writes A-V.jar; a POM's dependencies are each
# written as A-V.jar, except any whose version is listed in MISSING (it fails as Maven does).
_FAKE_MVN = """#!{python}
import pathlib, re, sys
args = sys.argv[1:]
with open({log!r}, "a") as log:
    log.write(" ".join(args) + "\\n")
out = pathlib.Path(next(a for a in args if a.startswith("-DoutputDirectory=")).split("=", 1)[1])
artifact = next((a.split("=", 1)[1] for a in args if a.startswith("-Dartifact=")), None)
if artifact:
    wanted = [tuple(artifact.split(":"))]
else:
    pom = pathlib.Path(args[args.index("-f") + 1]).read_text()
    wanted = re.findall(r"<groupId>(.*?)</groupId><artifactId>(.*?)</artifactId><version>(.*?)</version>", pom)
for group, name, version in wanted:
    if f"{{name}}:{{version}}" in {missing!r}:
        print(f"[ERROR] Could not find artifact {{group}}:{{name}}:jar:{{version}} in central")
        sys.exit(1)
    (out / f"{{name}}-{{version}}.jar").write_text("jar")
"""


def _fake_mvn(tmp_path: Path, monkeypatch, missing: list[str]) -> Path:
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    script = bin_dir / "mvn"
    script.write_text(_FAKE_MVN.format(python=sys.executable, log=str(log), missing=missing))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(bin_dir))
    return log


def test_the_connector_is_the_installed_spark_release():
    assert connector_artifact("4.1.3") == "org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.3"
    assert connector_artifact("4.2.0.dev1") == "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
    assert spark_release("4.2.0") == (4, 2, 0)


@pytest.mark.parametrize("bad", ["4.2", "four", ""])
def test_a_version_without_three_numbers_is_refused_by_name(bad):
    with pytest.raises(ConfigError, match=f"Spark version {bad!r}: expected MAJOR.MINOR.PATCH"):
        connector_artifact(bad)


def test_each_minor_release_gets_its_pom_dependencies_and_the_token_provider_fallback():
    token = "org.apache.spark:spark-token-provider-kafka-0-10_2.13"
    assert dependency_candidates("4.1.3") == [
        [f"{token}:4.1.3", "org.apache.kafka:kafka-clients:3.9.1", "org.apache.commons:commons-pool2:2.12.1"],
        [f"{token}:4.0.0", "org.apache.kafka:kafka-clients:3.9.1", "org.apache.commons:commons-pool2:2.12.1"],
    ]
    assert [c[1:] for c in dependency_candidates("4.2.0")] == [
        ["org.apache.kafka:kafka-clients:3.9.2", "org.apache.commons:commons-pool2:2.13.1"]
    ] * 2
    assert dependency_candidates("4.3.1")[0][1:] == dependency_candidates("4.2.0")[0][1:]  # nearest older
    assert dependency_candidates("4.0.0") == [[f"{token}:4.0.0", *dependency_candidates("4.1.0")[0][1:]]]


def test_the_own_token_provider_is_taken_when_maven_has_it(tmp_path, monkeypatch):
    log = _fake_mvn(tmp_path, monkeypatch, missing=[])
    found = connector_jars(cache=tmp_path / "cache", version="4.2.0")
    assert [jar.name for jar in found] == [
        "spark-sql-kafka-0-10_2.13-4.2.0.jar",
        "commons-pool2-2.13.1.jar",
        "kafka-clients-3.9.2.jar",
        "spark-token-provider-kafka-0-10_2.13-4.2.0.jar",
    ]
    assert found[-1].parent.name == "spark-kafka-deps-4.2.0-token-4.2.0"
    calls = len(log.read_text().splitlines())
    assert connector_jars(cache=tmp_path / "cache", version="4.2.0") == found  # cached: no Maven
    assert len(log.read_text().splitlines()) == calls


def test_a_token_provider_maven_lacks_falls_back_once_and_is_remembered(tmp_path, monkeypatch, capsys):
    log = _fake_mvn(tmp_path, monkeypatch, missing=["spark-token-provider-kafka-0-10_2.13:4.1.3"])
    found = connector_jars(cache=tmp_path / "cache", version="4.1.3")
    assert [jar.name for jar in found] == [
        "spark-sql-kafka-0-10_2.13-4.1.3.jar",
        "commons-pool2-2.12.1.jar",
        "kafka-clients-3.9.1.jar",
        f"spark-token-provider-kafka-0-10_2.13-{connector.TOKEN_PROVIDER_FALLBACK}.jar",
    ]
    assert "could not be resolved; trying org.apache.spark:spark-token-provider" in capsys.readouterr().err
    calls = len(log.read_text().splitlines())
    assert calls == 3  # the connector, the own token provider (failed), the fallback
    assert connector_jars(cache=tmp_path / "cache", version="4.1.3") == found  # no failing Maven run again
    assert len(log.read_text().splitlines()) == calls


def test_a_connector_maven_lacks_is_a_clear_error(tmp_path, monkeypatch):
    _fake_mvn(tmp_path, monkeypatch, missing=["spark-sql-kafka-0-10_2.13:4.1.4"])
    with pytest.raises(JarResolutionError, match="(?s)kafka-0-10_2.13:4.1.4.*PySpark release whose connector"):
        connector_jars(cache=tmp_path / "cache", version="4.1.4")


def test_when_no_token_provider_resolves_both_failures_are_told(tmp_path, monkeypatch):
    _fake_mvn(
        tmp_path,
        monkeypatch,
        missing=["spark-token-provider-kafka-0-10_2.13:4.1.3", "spark-token-provider-kafka-0-10_2.13:4.0.0"],
    )
    with pytest.raises(JarResolutionError, match="(?s)dependencies of .*4.1.3.*:4.1.3.*:4.0.0"):
        connector_jars(cache=tmp_path / "cache", version="4.1.3")

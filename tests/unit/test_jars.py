"""The jar cache: stamps, the Maven invocation and its failures (no network, no real Maven)."""

from __future__ import annotations

import stat
from pathlib import Path
from xml.etree import ElementTree

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliable_kafka import jars
from reliable_kafka.errors import JarResolutionError

ARTIFACTS = ["org.example:alpha:1.0", "org.example:beta_2.13:2.1"]

coordinate = st.from_regex(r"[a-z]{1,8}(\.[a-z]{1,8}){0,2}:[a-z0-9_-]{1,10}:[0-9]{1,2}\.[0-9]{1,2}", fullmatch=True)


@given(st.lists(coordinate, min_size=1, max_size=6, unique=True), st.randoms())
def test_digest_ignores_order_and_duplicates(artifacts, rnd):
    shuffled = list(artifacts) + artifacts[:1]
    rnd.shuffle(shuffled)
    assert jars.artifacts_digest(shuffled) == jars.artifacts_digest(artifacts)


@given(st.lists(coordinate, min_size=2, max_size=6, unique=True))
def test_digest_changes_when_the_artifact_set_changes(artifacts):
    assert jars.artifacts_digest(artifacts[1:]) != jars.artifacts_digest(artifacts)


def _fake_mvn(bin_dir: Path, body: str) -> Path:
    """An executable `mvn` on a private PATH; it logs its arguments to calls.log."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "mvn"
    script.write_text(f'#!/bin/sh\necho "$@" >> "{bin_dir}/calls.log"\n{body}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bin_dir / "calls.log"


# A fake mvn that "resolves" by writing one jar into -DoutputDirectory.
_COPY_ONE_JAR = """for arg in "$@"; do
  case "$arg" in -DoutputDirectory=*) out="${arg#-DoutputDirectory=}";; esac
done
echo jar > "$out/alpha-1.0.jar"
"""


def test_second_call_reads_the_stamp_and_runs_no_maven(tmp_path, monkeypatch):
    calls = _fake_mvn(tmp_path / "bin", _COPY_ONE_JAR)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    first = jars.resolve_jars("demo", ARTIFACTS, cache_dir=tmp_path / "cache")
    second = jars.resolve_jars("demo", list(reversed(ARTIFACTS)), cache_dir=tmp_path / "cache")
    assert first == second == [tmp_path / "cache" / "jars" / "demo" / "alpha-1.0.jar"]
    assert len(calls.read_text().splitlines()) == 1
    assert jars.is_resolved(tmp_path / "cache" / "jars" / "demo", ARTIFACTS)


def test_maven_gets_the_documented_arguments(tmp_path, monkeypatch):
    calls = _fake_mvn(tmp_path / "bin", _COPY_ONE_JAR)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    jars.resolve_jars("demo", ARTIFACTS, cache_dir=tmp_path / "cache")
    args = calls.read_text().split()
    assert "-B" in args and "-q" in args and "dependency:copy-dependencies" in args
    assert "-DincludeScope=runtime" in args
    assert f"-Dmaven.repo.local={tmp_path / 'cache' / 'm2'}" in args


def test_intransitive_copy_uses_dependency_copy_and_its_own_stamp(tmp_path, monkeypatch):
    calls = _fake_mvn(tmp_path / "bin", _COPY_ONE_JAR)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    jars.resolve_jars("demo", ARTIFACTS, cache_dir=tmp_path / "cache", transitive=False)
    target = tmp_path / "cache" / "jars" / "demo"
    assert "dependency:copy" in calls.read_text().split()
    assert jars.is_resolved(target, ARTIFACTS, transitive=False)
    assert not jars.is_resolved(target, ARTIFACTS)


@pytest.mark.parametrize("transitive", [True, False])
def test_the_throwaway_pom_lists_every_artifact(transitive):
    coordinates = [tuple(a.split(":")) for a in ARTIFACTS]
    pom = ElementTree.fromstring(jars._pom(coordinates, transitive=transitive))
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    assert pom.findtext("m:packaging", namespaces=ns) == "pom"
    where = ".//m:dependencies/m:dependency" if transitive else ".//m:artifactItems/m:artifactItem"
    listed = [
        ":".join(item.findtext(f"m:{f}", namespaces=ns) for f in ("groupId", "artifactId", "version"))
        for item in pom.findall(where, ns)
    ]
    assert listed == ARTIFACTS


def test_a_changed_artifact_list_resolves_again(tmp_path, monkeypatch):
    calls = _fake_mvn(tmp_path / "bin", _COPY_ONE_JAR)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    jars.resolve_jars("demo", ARTIFACTS, cache_dir=tmp_path / "cache")
    jars.resolve_jars("demo", ARTIFACTS + ["org.example:gamma:3.0"], cache_dir=tmp_path / "cache")
    assert len(calls.read_text().splitlines()) == 2


def test_missing_maven_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(JarResolutionError) as caught:
        jars.resolve_jars("demo", ARTIFACTS, cache_dir=tmp_path / "cache")
    message = str(caught.value)
    assert "Maven ('mvn') is not on PATH" in message
    assert "install Maven" in message


def test_offline_maven_is_a_clear_error_and_leaves_no_partial_jars(tmp_path, monkeypatch):
    _fake_mvn(
        tmp_path / "bin",
        'echo "[ERROR] Could not transfer artifact org.example:alpha:pom:1.0: '
        'java.net.UnknownHostException: repo.maven.apache.org"\nexit 1',
    )
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(JarResolutionError) as caught:
        jars.resolve_jars("demo", ARTIFACTS, cache_dir=tmp_path / "cache")
    message = str(caught.value)
    assert "exited with code 1" in message
    assert "UnknownHostException" in message  # the Maven output tail
    assert "offline" in message and ".lastUpdated" in message and "-U" in message
    assert caught.value.retriable
    jars_dir = tmp_path / "cache" / "jars"
    assert list(jars_dir.iterdir()) == [jars_dir / ".demo.lock"]


def test_maven_that_copies_nothing_is_an_error(tmp_path, monkeypatch):
    _fake_mvn(tmp_path / "bin", "exit 0")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(JarResolutionError, match="copied no jars"):
        jars.resolve_jars("demo", ARTIFACTS, cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("bad", ["org.example:alpha", "org.example::1.0", "a:b:c:d"])
def test_bad_coordinates_are_rejected_by_name(tmp_path, bad):
    with pytest.raises(JarResolutionError, match="group:artifact:version"):
        jars.resolve_jars("demo", [bad], cache_dir=tmp_path)


def test_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RK_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert jars.cache_dir() == tmp_path / "home" / ".cache" / "reliable-kafka"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert jars.cache_dir() == tmp_path / "xdg" / "reliable-kafka"
    monkeypatch.setenv("RK_CACHE_DIR", str(tmp_path / "rk"))
    assert jars.cache_dir() == tmp_path / "rk"


def test_kafka_artifacts_pin_the_broker_and_an_slf4j1_log4j2_binding():
    artifacts = jars.kafka_artifacts()
    assert f"org.apache.kafka:kafka_2.13:{jars.KAFKA_VERSION}" in artifacts
    # Kafka 3.9 to 4.4 use slf4j 1.7: the slf4j2 binding would leave the broker without a log.
    assert any(":log4j-slf4j-impl:" in a for a in artifacts)
    assert not any("slf4j2" in a for a in artifacts)

"""Building and choosing reliable-kafka's Java Spark functions (reliable_kafka.spark.jvm_functions)
without Spark: the mode setting, the fallback when no JDK is there or javac fails, the
content-addressed cache. The functions themselves are tested in
tests/integration/test_spark_jvm_functions.py."""

from __future__ import annotations

import logging
import shutil

import pytest

from reliable_kafka.errors import ConfigError, JarResolutionError
from reliable_kafka.spark import jvm_functions
from reliable_kafka.spark.jvm_functions import MODE_ENV, functions_jar, functions_jar_or_none, functions_mode


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(jvm_functions, "_warned", set())
    monkeypatch.setattr(jvm_functions, "_classes", {})  # fake gateways' ids must not outlive the test
    monkeypatch.delenv(MODE_ENV, raising=False)


@pytest.mark.parametrize(("value", "mode"), [(None, "auto"), ("", "auto"), ("OFF", "off"), (" on ", "on")])
def test_mode_comes_from_the_environment(monkeypatch, value, mode):
    if value is not None:
        monkeypatch.setenv(MODE_ENV, value)
    assert functions_mode() == mode


def test_an_unknown_mode_is_refused_by_name(monkeypatch):
    monkeypatch.setenv(MODE_ENV, "yes")
    with pytest.raises(ConfigError, match="RK_SPARK_JVM_FUNCTIONS='yes'"):
        functions_mode()


def test_without_javac_auto_warns_once_and_falls_back(monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(jvm_functions, "_tool", lambda name: None)
    with caplog.at_level(logging.WARNING, logger=jvm_functions.__name__):
        assert functions_jar_or_none(cache=tmp_path) is None
        assert functions_jar_or_none(cache=tmp_path) is None
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "no 'javac'" in warnings[0] and "Spark SQL path" in warnings[0]


def test_without_javac_on_raises_and_off_never_builds(monkeypatch, tmp_path):
    monkeypatch.setattr(jvm_functions, "_tool", lambda name: None)
    monkeypatch.setenv(MODE_ENV, "on")
    with pytest.raises(JarResolutionError, match="no 'javac'"):
        functions_jar_or_none(cache=tmp_path)

    def never(*args, **kwargs):
        raise AssertionError("built although off")

    monkeypatch.setattr(jvm_functions, "functions_jar", never)
    monkeypatch.setenv(MODE_ENV, "off")
    assert functions_jar_or_none(cache=tmp_path) is None


def test_a_failed_build_says_why_and_leaves_nothing_behind(monkeypatch, tmp_path):
    """A fake javac that fails: its output is in the error, and no half-built directory remains
    to be mistaken for a jar."""
    javac = tmp_path / "javac"
    javac.write_text("#!/bin/sh\necho 'Broken.java:1: error: class, interface, enum, or record expected' >&2\nexit 2\n")
    javac.chmod(0o755)
    monkeypatch.setattr(jvm_functions, "_tool", lambda name: str(javac))
    cache = tmp_path / "cache"
    with pytest.raises(JarResolutionError, match="(?s)exited with code 2.*Broken.java:1: error"):
        functions_jar(cache=cache)
    assert list((cache / "jars" / "rk-spark-functions").iterdir()) == [
        cache / "jars" / "rk-spark-functions" / f".{jvm_functions.sources_digest(jvm_functions._spark_home()[1])}.lock"
    ]


def test_the_cache_key_follows_the_sources_and_the_spark_version(monkeypatch, tmp_path):
    sources = tmp_path / "jvm"
    shutil.copytree(jvm_functions._SOURCES, sources)
    monkeypatch.setattr(jvm_functions, "_SOURCES", sources)
    before = jvm_functions.sources_digest("4.2.0")
    assert jvm_functions.sources_digest("4.2.1") != before
    (sources / "RootXors.java").write_text((sources / "RootXors.java").read_text() + "\n// changed\n")
    assert jvm_functions.sources_digest("4.2.0") != before


def test_a_built_jar_is_read_from_the_cache_without_javac(monkeypatch, tmp_path):
    """Stamp present: no build (javac is never looked up); the directory is named by the digest."""
    digest = jvm_functions.sources_digest(jvm_functions._spark_home()[1])
    target = tmp_path / "jars" / "rk-spark-functions" / digest
    target.mkdir(parents=True)
    (target / jvm_functions.JAR_NAME).write_bytes(b"PK")
    (target / ".built").write_text(digest + "\n")
    monkeypatch.setattr(jvm_functions, "_tool", lambda name: pytest.fail("looked for javac"))
    assert functions_jar(cache=tmp_path) == target / jvm_functions.JAR_NAME


class _Package:
    """What py4j gives for a name the JVM has no class of: a package, whatever is asked of it."""

    def __getattr__(self, name: str):
        return _Package()


def _session_without_the_class():
    from types import SimpleNamespace

    return SimpleNamespace(sparkContext=SimpleNamespace(_gateway=object(), _jvm=_Package()), _jsparkSession=None)


def test_a_jvm_without_the_class_takes_the_sql_path_with_one_warning(caplog):
    from reliable_kafka.spark.jvm_functions import use_jvm_functions

    session = _session_without_the_class()
    with caplog.at_level(logging.WARNING, logger=jvm_functions.__name__):
        assert use_jvm_functions(session) is False
        assert use_jvm_functions(session) is False
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "not on the Spark JVM's classpath" in warnings[0]


def test_a_jvm_without_the_class_raises_when_on_and_is_not_asked_when_off(monkeypatch):
    from reliable_kafka.spark.jvm_functions import use_jvm_functions

    monkeypatch.setenv(MODE_ENV, "on")
    with pytest.raises(ConfigError, match="RK_SPARK_JVM_FUNCTIONS=on: class reliablekafka.spark"):
        use_jvm_functions(_session_without_the_class())
    monkeypatch.setenv(MODE_ENV, "off")
    assert use_jvm_functions(None) is False  # never looks at the session


def test_a_directory_left_without_its_stamp_is_built_again(tmp_path):
    """A real build with javac (a JDK is what the Spark tests run on): a target directory without
    the stamp (an interrupted copy, a stray file) is replaced, and the jar holds the classes."""
    import zipfile

    if jvm_functions._tool("javac") is None:
        pytest.skip("no javac on this machine: the fallback tests above cover it")
    digest = jvm_functions.sources_digest(jvm_functions._spark_home()[1])
    target = tmp_path / "jars" / "rk-spark-functions" / digest
    target.mkdir(parents=True)
    (target / "stray").write_text("x")
    jar = functions_jar(cache=tmp_path)
    assert jar == target / jvm_functions.JAR_NAME and (target / ".built").read_text().strip() == digest
    assert not (target / "stray").exists()
    names = zipfile.ZipFile(jar).namelist()
    assert {"reliablekafka/spark/ReliableKafkaFunctions.class", "reliablekafka/spark/ChildXor.class"} <= set(names)


def _sources_with_an_internal_api_change(tmp_path, monkeypatch, broken: str):
    """A copy of the Java sources where ``broken`` uses a Catalyst class this Spark lacks, as a
    source using Spark internals would after an API change in another Spark release."""
    if jvm_functions._tool("javac") is None:
        pytest.skip("no javac on this machine: the fallback tests above cover it")
    sources = tmp_path / "jvm"
    shutil.copytree(jvm_functions._SOURCES, sources)
    text = (sources / broken).read_text()
    (sources / broken).write_text(
        text.replace("import ", "import org.apache.spark.sql.catalyst.plans.logical.NoSuchPlanInThisSpark;\nimport ", 1)
    )
    monkeypatch.setattr(jvm_functions, "_SOURCES", sources)


def _classes_in(jar):
    import zipfile

    names = zipfile.ZipFile(jar).namelist()
    return {name.rsplit("/", 1)[-1].split("$")[0].removesuffix(".class") for name in names if name.endswith(".class")}


def test_a_source_that_no_longer_compiles_costs_plan_reuse_only(monkeypatch, tmp_path, caplog):
    """BatchPlans.java failing: the jar is built without it, keeps the functions and TrackedRows,
    and says (once) that batch plan reuse is lost and why."""
    _sources_with_an_internal_api_change(tmp_path, monkeypatch, "BatchPlans.java")
    with caplog.at_level(logging.WARNING, logger=jvm_functions.__name__):
        jar = functions_jar_or_none(cache=tmp_path / "cache")
        assert functions_jar_or_none(cache=tmp_path / "cache") == jar
    assert _classes_in(jar) == {"ChildXor", "ReliableKafkaFunctions", "RootXors", "TrackedRows"}
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings
    assert "batch plan reuse (BatchPlans.java) did not compile" in warnings[0]
    assert "NoSuchPlanInThisSpark" in warnings[0]


def test_when_the_functions_no_longer_compile_the_jar_keeps_tracked_rows(monkeypatch, tmp_path, caplog):
    """ChildXor.java failing: only the public-API source is left, and the jar still holds it (the
    single query needs it); the warning names what is lost."""
    _sources_with_an_internal_api_change(tmp_path, monkeypatch, "ChildXor.java")
    with caplog.at_level(logging.WARNING, logger=jvm_functions.__name__):
        jar = functions_jar_or_none(cache=tmp_path / "cache")
    assert _classes_in(jar) == {"TrackedRows"}
    assert jvm_functions.lost(jar).startswith("batch plan reuse and the Java output functions")
    assert any("Java output functions" in r.getMessage() for r in caplog.records)


def test_a_jvm_without_batch_plans_builds_each_plan_anew_with_one_warning(monkeypatch, caplog):
    session = _session_without_the_class()
    with caplog.at_level(logging.WARNING, logger=jvm_functions.__name__):
        assert jvm_functions.batch_plans_available(session) is False
        assert jvm_functions.batch_plans_available(session) is False
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "batch plan reuse unavailable" in warnings[0] and "BatchPlans" in warnings[0]
    monkeypatch.setenv(MODE_ENV, "off")
    assert jvm_functions.batch_plans_available(None) is False  # never looks at the session

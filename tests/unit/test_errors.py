"""Every error the library raises derives from ReliableKafkaError, and from the built-in kind a
caller may already catch (ValueError, TimeoutError...), as confluent-kafka's errors do."""

import ast
import builtins
from pathlib import Path

import pytest

import reliable_kafka
from reliable_kafka import errors

PACKAGE = Path(reliable_kafka.__file__).parent
BUILTIN_ERRORS = {
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, Exception) and name != "NotImplementedError"
}
# A raise inside a user's handler, not the library's: the demo's and the simulation's bolts fail
# some tuples on purpose. And the in-memory Kafka raises what confluent-kafka raises in its place
# (a full local queue, a closed consumer), so that code under test sees the real client's errors.
# A mapping's missing key is a KeyError by the mapping protocol (``pop(key, None)`` and ``in`` rely
# on it): the spout's held records are a MutableMapping.
USER_CODE = {
    ("demo.py", "RuntimeError"),
    ("testing/shipped_simulation.py", "RuntimeError"),
    ("testing/memory_broker.py", "BufferError"),
    ("testing/memory_consumer.py", "RuntimeError"),
    ("spout/roots.py", "KeyError"),
}


def _builtin_raises():
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), filename=name)):
            if isinstance(node, ast.Raise) and node.exc is not None:
                called = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if isinstance(called, ast.Name) and called.id in BUILTIN_ERRORS:
                    yield name, called.id, node.lineno


def test_the_library_raises_no_builtin_exception_directly():
    found = [(name, kind, line) for name, kind, line in _builtin_raises() if (name, kind) not in USER_CODE]
    assert not found, f"raise a ReliableKafkaError subclass instead (reliable_kafka/errors.py): {found}"


@pytest.mark.parametrize("name", errors.__all__)
def test_every_error_class_is_a_reliable_kafka_error(name):
    assert issubclass(getattr(errors, name), errors.ReliableKafkaError)


@pytest.mark.parametrize(
    ("error", "builtin"),
    [
        (errors.ConfigError, ValueError),
        (errors.DecodeError, ValueError),
        (errors.ArgumentError, ValueError),
        (errors.StateError, RuntimeError),
        (errors.ComponentDiedError, RuntimeError),
        (errors.WaitTimeoutError, TimeoutError),
        (errors.MissingExtraError, ImportError),
    ],
)
def test_errors_callers_caught_as_builtins_still_are(error, builtin):
    assert issubclass(error, builtin)


def test_the_core_refuses_bad_arguments_with_argument_error():
    from reliable_kafka.core.latency import BOUNDS_S, quantile
    from reliable_kafka.core.tracker import Backoff

    with pytest.raises(errors.ArgumentError, match="attempt numbers start at 1"):
        Backoff().delay_ms(0)
    with pytest.raises(errors.ArgumentError, match="quantile"):
        quantile(BOUNDS_S, [0] * (len(BOUNDS_S) + 1), 0)


def test_local_cluster_reports_a_dead_component_with_its_name_and_cause():
    import threading

    from reliable_kafka.local import LocalCluster

    class Dies:
        name = "bolt-x"
        ready = threading.Event()

        def run(self, stop=None):
            raise KeyError("boom")

    cluster = LocalCluster(Dies())
    with pytest.raises(errors.ComponentDiedError) as died:
        cluster.start(ready_timeout=30)
    assert died.value.component == "bolt-x" and isinstance(died.value.__cause__, KeyError)
    cluster.stop()
    with pytest.raises(errors.WaitTimeoutError, match="not reached within 0s: never"):
        LocalCluster().wait_until(lambda: False, timeout=0, what="never")


def test_errors_defined_outside_errors_py_are_reliable_kafka_errors_too():
    from confluent_kafka import KafkaError, KafkaException

    from reliable_kafka.kafka.deadline import StuckCall
    from reliable_kafka.kafka.produce import ProducerUnusable
    from reliable_kafka.spout.reread import RereadFailed

    for error in (StuckCall, ProducerUnusable, RereadFailed):
        assert issubclass(error, errors.ReliableKafkaError), error
    # still the KafkaException that transaction code catches, with confluent-kafka's error inside
    unusable = ProducerUnusable(KafkaError(KafkaError._FATAL, "fenced", fatal=True))
    assert isinstance(unusable, KafkaException) and unusable.args[0].fatal()


def test_every_exception_class_the_package_defines_is_a_reliable_kafka_error():
    import importlib

    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        for node in ast.parse(path.read_text(), filename=name).body:
            # private ones are control flow inside a module, never seen by callers; simulation.py is going away
            if not isinstance(node, ast.ClassDef) or node.name.startswith("_") or name == "testing/simulation.py":
                continue
            bases = [base.id for base in node.bases if isinstance(base, ast.Name)]
            if any(base in BUILTIN_ERRORS or base.endswith(("Error", "Exception")) for base in bases):
                found.append((name, node.name))
    assert found
    outside = []
    for name, cls in found:
        module = importlib.import_module("reliable_kafka." + name.removesuffix(".py").replace("/", "."))
        if not issubclass(getattr(module, cls), errors.ReliableKafkaError):
            outside.append(f"{name}:{cls}")
    assert not outside, f"derive these from ReliableKafkaError (reliable_kafka/errors.py): {outside}"

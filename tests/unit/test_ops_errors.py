"""A component's last error and its rate-limited tracebacks (reliable_kafka.ops.errors)."""

import logging

from reliable_kafka.ops.errors import ErrorLog, error_log, handler_raised, last_error_of


class Component:
    name = "validate"


def _raise(message):
    try:
        raise ValueError(message)
    except ValueError as exc:
        return exc


def test_the_last_error_keeps_type_message_frames_host_pid_and_a_count():
    component = Component()
    assert last_error_of(component) is None
    handler_raised(component, _raise("first"), logging.getLogger("t"), "%s failed", "x", where="in[0]@1")
    handler_raised(component, _raise("second"), logging.getLogger("t"), "%s failed", "x", where="in[0]@2")
    last = last_error_of(component).as_json()
    assert last["type"] == "ValueError" and last["message"] == "second" and last["count"] == 2
    assert last["where"] == "in[0]@2" and last["pid"] > 0 and last["host"]
    assert any("in _raise" in frame and "raise ValueError" in frame for frame in last["frames"])


def test_one_traceback_per_error_type_per_interval_then_a_count(caplog):
    now = [0.0]
    component = Component()
    errors = error_log(component)
    errors.clock = lambda: now[0]
    logger = logging.getLogger("rate")
    with caplog.at_level(logging.ERROR, logger="rate"):
        for _ in range(58):
            handler_raised(component, _raise("bad"), logger, "handler raised on %s", "in[0]")
        assert len(caplog.records) == 1 and caplog.records[0].exc_info is not None
        handler_raised(component, KeyError("k"), logger, "handler raised on %s", "in[0]")  # another type: in full
        assert len(caplog.records) == 2 and caplog.records[1].exc_info is not None
        now[0] = 61.0
        handler_raised(component, _raise("bad"), logger, "handler raised on %s", "in[0]")
    assert len(caplog.records) == 3
    line = caplog.records[2]
    assert line.exc_info is None
    assert "ValueError raised 58 more times in the last 61 s" in line.getMessage()


def test_should_log_is_per_type():
    errors = ErrorLog(interval_s=10, clock=lambda: 0.0)
    assert errors.should_log("ValueError")[0] and errors.should_log("KeyError")[0]
    assert not errors.should_log("ValueError")[0]

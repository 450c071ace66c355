"""librdkafka's log lines go through Python logging, never raw to stderr (reliable_kafka.client_log)."""

import logging
import subprocess
import sys
import textwrap

from reliable_kafka.client_log import LOGGER_NAME, LibrdkafkaLog, with_log


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _log(interval_s: float = 30.0):
    logger = logging.getLogger(f"{LOGGER_NAME}.test")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    records = _Records()
    logger.handlers = [records]
    clock = _Clock()
    return LibrdkafkaLog(logger, interval_s=interval_s, clock=clock), records.records, clock


REFUSED = "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused"


def test_connection_lines_are_info_and_rate_limited_per_client_and_facility():
    log, records, clock = _log()
    for _ in range(5):  # confluent-kafka's call: level already mapped from syslog 3
        log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#producer-1", REFUSED)
    log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-2", REFUSED)
    log.log(logging.WARNING, "%s [%s] %s", "GETPID", "rdkafka#producer-1", "Failed to acquire PID")
    assert [(r.levelno, r.getMessage()) for r in records] == [
        (logging.INFO, f"FAIL [rdkafka#producer-1] {REFUSED}"),
        (logging.INFO, f"FAIL [rdkafka#consumer-2] {REFUSED}"),
        (logging.INFO, "GETPID [rdkafka#producer-1] Failed to acquire PID"),
    ]
    clock.now += 30.0
    log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#producer-1", REFUSED)
    assert records[-1].levelno == logging.INFO
    assert records[-1].getMessage().endswith("(4 similar lines in the last 30 s left out)")


def test_other_lines_and_security_failures_keep_their_level():
    log, records, _ = _log()
    log.log(logging.WARNING, "%s [%s] %s", "MAXPOLL", "rdkafka#consumer-1", "max.poll.interval.ms exceeded")
    log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#producer-1", "SSL handshake failed")
    log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#producer-1", "SASL authentication error")
    log.log(logging.DEBUG, "%s [%s] %s", "FAIL", "rdkafka#producer-1", REFUSED)
    assert [r.levelno for r in records] == [logging.WARNING, logging.ERROR, logging.ERROR, logging.DEBUG]


def test_with_log_copies_and_keeps_a_callers_own_logger():
    config = {"bootstrap.servers": "x"}
    assert isinstance(with_log(config)["logger"], LibrdkafkaLog)
    assert "logger" not in config
    own = logging.getLogger("mine")
    assert with_log({"logger": own})["logger"] is own


_SCRIPT = textwrap.dedent("""
    import logging, sys, time
    logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format="%(levelname)s %(name)s: %(message)s")
    from reliable_kafka.offsets import end_offsets
    from reliable_kafka.kafka.admin import admin_client
    from reliable_kafka.kafka.clients import new_consumer, new_producer
    closed = "127.0.0.1:1"
    producer = new_producer(closed)
    producer.produce("t", b"x")
    consumer = new_consumer(closed, "g")
    consumer.subscribe(["t"])
    admin = admin_client(closed)
    try:
        end_offsets(closed, "t", timeout=1.0)
    except Exception:
        pass
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        producer.poll(0.2)
        consumer.consume(1, 0.2)
        admin.poll(0)
    print("done", flush=True)
""")


def test_clients_against_a_closed_port_write_no_raw_librdkafka_lines():
    run = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    raw = [line for line in run.stderr.splitlines() if line.startswith(("%3|", "%4|", "%5|", "%6|", "%7|"))]
    assert raw == [], f"librdkafka wrote raw lines to stderr: {raw[:5]}"
    logged = [line for line in run.stdout.splitlines() if line.startswith(f"INFO {LOGGER_NAME}: FAIL [")]
    clients = {line.split("[")[1].split("]")[0] for line in logged}
    assert any(c.startswith("rdkafka#producer") for c in clients), run.stdout
    assert any(c.startswith("rdkafka#consumer") for c in clients), run.stdout
    assert all("Connection refused" in line for line in logged)
    assert "done" in run.stdout

"""The live page in a real browser: Debian's headless Chromium driven by Selenium.

Needs ``chromium`` and ``chromium-driver`` from apt (``.ci/browser.sh``); Selenium is given
``/usr/bin/chromedriver`` explicitly, so Selenium Manager never downloads anything. Marked
``browser``: ``pytest -m "not browser"`` leaves it out; with ``CI=true`` a missing Chromium fails
the test instead of skipping it. The screenshot is saved in the test's tmp dir (its path is
printed), and also to ``$RK_UI_SCREENSHOT`` when set (how docs/img/ui.png was made).
"""

from __future__ import annotations

import os
import random
import shutil
import threading
import time
from pathlib import Path

import pytest

from examples.word_count import build
from reliable_kafka import LocalCluster, Tracking
from reliable_kafka.demo import SENTENCES
from reliable_kafka.kafka.admin import admin_client, ensure_topics
from reliable_kafka.ops.ui import StatusPage
from reliable_kafka.testing.records import produce_values
from reliable_kafka.testing.topics import create_topics, unique_name
from reliable_kafka.topology import TopologyTopics

pytestmark = pytest.mark.browser

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


def _browser():
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        message = "Debian's chromium and chromium-driver are not installed: run .ci/browser.sh"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1500,1100",
    ):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)


def _wait(condition, *, timeout: float, what: str, detail=lambda: ""):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout:.0f} s: {what}\n{detail()}")
        time.sleep(0.5)


def test_the_page_shows_a_running_word_count_with_moving_numbers(kafka_bootstrap, tmp_path):
    topology = unique_name("ui")
    sentences, words = f"{topology}-sentences", f"{topology}-words"
    create_topics(kafka_bootstrap, {sentences: 2, words: 2, f"{topology}.sentences": 2})
    ensure_topics(admin_client(kafka_bootstrap), TopologyTopics(topology, ackers=2))
    _, components = build(kafka_bootstrap, topology=topology, sentences=sentences, words=words)
    for component in components:
        component.status_interval_s = 1.0
    stop = threading.Event()

    def keep_writing():  # a live stream, so that the rates are not zero and the numbers move
        rng = random.Random(5)
        while not stop.wait(0.3):
            produce_values(kafka_bootstrap, sentences, [rng.choice(SENTENCES).encode() for _ in range(40)])

    writer = threading.Thread(target=keep_writing, daemon=True)
    page = StatusPage(bootstrap_servers=kafka_bootstrap, topology=topology, port=0).start()
    driver = None
    try:
        with LocalCluster(*components):
            writer.start()
            driver = _browser()
            driver.get(page.url)
            from selenium.webdriver.common.by import By

            # the page redraws its tables every 2 s: read what it shows in one script (one moment)
            read = """
                const text = (el, sel) => { const x = el.querySelector(sel); return x ? x.textContent : ""; };
                return {
                  rows: Object.fromEntries([...document.querySelectorAll("#components tbody tr")].map(
                    (tr) => [tr.dataset.component, text(tr, "td.rate-in")])),
                  order: [...document.querySelectorAll("#components tbody tr")].map((tr) => tr.dataset.component),
                  graph: [...document.querySelectorAll("#graph g.node")].map((g) => g.dataset.component),
                  committed: [...document.querySelectorAll("#partitions td.committed")].map((td) => td.textContent),
                  refreshes: +document.getElementById("refreshes").textContent,
                  topology: document.getElementById("topology").textContent,
                  error: document.getElementById("error").textContent,
                  lines: document.querySelectorAll("#charts .chart polyline").length,
                };"""

            def shown() -> dict:
                return driver.execute_script(read)

            def rate(text: str) -> float:
                text = text.replace(",", "")
                return float(text) if text not in ("", "-") else 0.0

            names = {c.name for c in components}
            state = lambda: driver.find_element(By.TAG_NAME, "body").text  # noqa: E731
            _wait(
                lambda: names <= set(shown()["rows"]), timeout=90, what="all four components on the page", detail=state
            )
            _wait(
                lambda: all(rate(v) > 0 for name, v in shown()["rows"].items() if name in names),
                timeout=90,
                what="non-zero input rates for every component",
                detail=state,
            )
            page_now = shown()
            acker, spout, split, count = components
            assert set(page_now["graph"]) == names  # ackers too, on the ack path below the data flow
            # topology order: the spout, the bolts by their inputs (split writes count's), the acker
            assert page_now["order"] == [spout.name, split.name, count.name, acker.name]
            assert page_now["topology"] == topology
            before = page_now
            _wait(
                lambda: (now := shown())["committed"] != before["committed"] and now["refreshes"] > before["refreshes"],
                timeout=90,
                what="committed offsets that move on the page",
                detail=state,
            )
            assert shown()["lines"] >= 9  # three charts per spout or bolt
            assert shown()["error"] == ""
            time.sleep(4)  # a few more refreshes, so that the charts in the screenshot have lines
            shot = tmp_path / "ui.png"
            assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
            print(f"screenshot: {shot}")
            if os.environ.get("RK_UI_SCREENSHOT"):
                shutil.copyfile(shot, os.environ["RK_UI_SCREENSHOT"])
    finally:
        stop.set()
        if driver is not None:
            driver.quit()
        page.close()


def test_the_page_shows_dead_letters_one_failed_rate_and_gaps(kafka_bootstrap, tmp_path):
    """A bolt that raises on every record: the dead-letter panel lists letters and counts them per
    reason, the bolt's failed rate is its input rate (a handler error is not counted twice), and a
    series with a hole in its timestamps is drawn as two lines."""
    from reliable_kafka import AckerWorker, BasicBolt, Spout
    from reliable_kafka.core.tracker import Backoff

    topology = unique_name("ui-dlq")
    source = f"{topology}-in"
    create_topics(kafka_bootstrap, {source: 1, f"{topology}.mid": 1})
    ensure_topics(admin_client(kafka_bootstrap), TopologyTopics(topology, ackers=1))

    def always_raise(tuple_, collector):
        raise ValueError(f"cannot parse {tuple_.value[:12]!r}")

    on = {"topology": topology, "connection": kafka_bootstrap}
    components = [
        AckerWorker(**on, tracking=Tracking(ackers=1)),
        Spout(
            **on,
            source_topics=source,
            group_id=f"{topology}-spout",
            emit_to=f"{topology}.mid",
            tracking=Tracking(max_retries=0, backoff=Backoff(initial_ms=0)),
        ),
        BasicBolt(**on, source_topics=f"{topology}.mid", group_id=f"{topology}-parse", handler=always_raise),
    ]
    for component in components:
        component.status_interval_s = 1.0
    stop = threading.Event()

    def keep_writing():
        n = 0
        while not stop.wait(0.2):
            produce_values(kafka_bootstrap, source, [f"record {n + i}".encode() for i in range(5)])
            n += 5

    writer = threading.Thread(target=keep_writing, daemon=True)
    page = StatusPage(bootstrap_servers=kafka_bootstrap, topology=topology, port=0).start()
    driver = None
    try:
        with LocalCluster(*components):
            writer.start()
            driver = _browser()
            driver.get(page.url)
            read = """
                const cell = (tr, sel) => { const x = tr.querySelector(sel); return x ? x.textContent : ""; };
                const bolt = document.querySelector('#components tbody tr[data-component="' + arguments[0] + '"]');
                return {
                  reasons: Object.fromEntries([...document.querySelectorAll("#dlq-reasons tbody tr[data-reason]")].map(
                    (tr) => [tr.dataset.reason, +cell(tr, "td.count")])),
                  letters: [...document.querySelectorAll("#dlq-letters tbody tr")].map((tr) => cell(tr, "td.reason")),
                  rateIn: bolt ? cell(bolt, "td.rate-in") : "", rateFail: bolt ? cell(bolt, "td.rate-fail") : "",
                  segments: segments([{t: 0}, {t: 1}, {t: 2}, {t: 3}, {t: 30}, {t: 31}, {t: 32}], 1).length,
                  unbroken: segments([{t: 0}, {t: 1}, {t: 3}, {t: 4}, {t: 7}, {t: 8}], 1).length,
                  missed: segments([{t: 0}, {t: 1}, {t: 2, gap: true}, {t: 3}], 1).length,
                  error: document.getElementById("error").textContent,
                };"""
            from selenium.webdriver.common.by import By

            bolt = components[2].name
            state = lambda: driver.find_element(By.TAG_NAME, "body").text  # noqa: E731

            def number(text: str) -> float:
                text = text.replace(",", "")
                return float(text) if text not in ("", "-") else 0.0

            shown = _wait(
                lambda: (s := driver.execute_script(read, bolt))["letters"] and number(s["rateIn"]) > 0 and s,
                timeout=90,
                what="dead letters in the panel and an input rate for the failing bolt",
                detail=state,
            )
            assert all("cannot parse" in reason for reason in shown["letters"]), shown["letters"]
            # counted per error type, whatever each message says
            assert list(shown["reasons"]) == ["ValueError"] and shown["reasons"]["ValueError"] >= len(shown["letters"])
            # every tuple failed once: the failed rate is the input rate, not twice it
            assert 0 < number(shown["rateFail"]) <= 1.5 * number(shown["rateIn"]), shown
            assert (shown["segments"], shown["unbroken"], shown["missed"]) == (2, 1, 2)
            assert shown["error"] == ""
            time.sleep(3)
            shot = tmp_path / "ui-dead-letters.png"
            assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
            print(f"screenshot: {shot}")
            if os.environ.get("RK_UI_SCREENSHOT_DLQ"):
                shutil.copyfile(shot, os.environ["RK_UI_SCREENSHOT_DLQ"])
    finally:
        stop.set()
        if driver is not None:
            driver.quit()
        page.close()

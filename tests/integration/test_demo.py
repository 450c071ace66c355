"""The demo (Python engine, small) on the session broker: checked summary, progress, status."""

import io

from reliable_kafka import demo


def test_demo_prints_progress_its_status_and_how_to_watch_it(kafka_bootstrap):
    out = io.StringIO()
    summary = demo.run(
        sentences=300, fail_rate=0.05, engine="python", bootstrap_servers=kafka_bootstrap, timeout_s=240, out=out
    )
    text = out.getvalue()
    print(text)
    assert summary.ok, summary.render()
    assert "% committed" in text and "300/300" in text  # the progress line reached the end
    assert "$ reliable-kafka status --topology demo-" in text
    status = text[text.index("$ reliable-kafka status") : text.index("summary")]
    for kind in ("acker", "spout", "bolt"):
        assert f" {kind} " in status
    assert "SOURCE PARTITION" in status and "dead letters:" in status
    assert "reliable-kafka ui --topology demo-" in text and kafka_bootstrap in text

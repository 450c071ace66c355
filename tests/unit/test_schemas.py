"""The Avro schemas are package data, read through importlib.resources (any install layout)."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from reliable_kafka import codec
from reliable_kafka.codec import envelope
from reliable_kafka.errors import ConfigError


@pytest.fixture(autouse=True)
def fresh_schema_cache():
    envelope._schema.cache_clear()
    yield
    envelope._schema.cache_clear()


def test_schemas_are_package_data(monkeypatch):
    monkeypatch.delenv("RK_SCHEMA_DIR", raising=False)
    folder = resources.files("reliable_kafka").joinpath("schemas")
    for name in envelope._SCHEMA_FILES.values():
        assert json.loads(folder.joinpath(name).read_text(encoding="utf-8"))["type"] in ("record", "array")
    assert codec.schema_dir() == codec.schema_dir().parent / "schemas"
    assert codec.schema_dir().parent.name == "reliable_kafka"
    assert codec.decode_anchors(codec.encode_anchors({7: 9})) == {7: 9}


def test_rk_schema_dir_overrides_and_a_missing_file_is_a_config_error(monkeypatch, tmp_path):
    monkeypatch.setenv("RK_SCHEMA_DIR", str(tmp_path))
    assert codec.schema_dir() == tmp_path
    with pytest.raises(ConfigError, match=r"ack_batch\.avsc not found .*RK_SCHEMA_DIR"):
        codec.encode_ack_batch(1, [], [], [])  # (rk-anchors v2 is written without a schema file)


def test_rk_schema_dir_with_the_schemas_is_used(monkeypatch, tmp_path):
    source = resources.files("reliable_kafka").joinpath("schemas")
    for name in envelope._SCHEMA_FILES.values():
        (tmp_path / name).write_text(source.joinpath(name).read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setenv("RK_SCHEMA_DIR", str(tmp_path))
    assert codec.decode_ack_batch(codec.encode_ack_batch(5, [0], [3], [4])).sender == 5

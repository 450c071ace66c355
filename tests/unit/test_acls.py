"""The role -> ACL table (reliable_kafka.acls): what each role is granted, and nothing more."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType
from hypothesis import given
from hypothesis import strategies as st

from reliable_kafka.acls import ROLES, TABLE, markdown_table, role_acls
from reliable_kafka.errors import ConfigError

DOCS = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def granted(acls) -> set[tuple[str, str, str]]:
    return {(acl.operation, acl.resource_type, acl.name) for acl in acls}


def test_acker_needs_only_its_own_topics():
    acls = role_acls("acker", "wc", principal="User:acker")
    assert granted(acls) == {
        ("READ", "TOPIC", "wc.acks"),
        ("DESCRIBE_CONFIGS", "TOPIC", "wc.acks"),
        ("READ", "GROUP", "wc.ackers"),
        ("WRITE", "TOPIC", "wc.outcomes"),
        ("WRITE", "TOPIC", "wc.quarantine"),
        ("WRITE", "TOPIC", "wc.status"),
    }
    assert not any(acl.name in ("wc.dlq", "wc.failures", "wc.roots") for acl in acls)


def test_acker_that_creates_topics_may_create_and_see_them_all():
    acls = granted(role_acls("acker", "wc", principal="User:acker", create_topics=True, group="g"))
    for topic in ("acks", "outcomes", "dlq", "quarantine", "failures", "roots", "status"):
        assert ("CREATE", "TOPIC", f"wc.{topic}") in acls
    # seeing a topic comes with READ or WRITE (Kafka's implication); the others need DESCRIBE
    assert {("DESCRIBE", "TOPIC", f"wc.{t}") for t in ("dlq", "failures", "roots")} <= acls
    assert ("READ", "GROUP", "g") in acls


def test_spout():
    acls = granted(role_acls("spout", "wc", principal="User:s", source_topics=["in"], output_topics=["mid"], group="g"))
    assert acls == {
        ("READ", "TOPIC", "in"),
        ("READ", "GROUP", "g"),
        ("WRITE", "TOPIC", "mid"),
        ("WRITE", "TOPIC", "wc.acks"),
        ("READ", "TOPIC", "wc.outcomes"),
        ("DESCRIBE", "GROUP", "wc.outcome-reader"),
        ("WRITE", "TOPIC", "wc.dlq"),
        ("WRITE", "TOPIC", "wc.quarantine"),
        ("READ", "TOPIC", "wc.failures"),
        ("DESCRIBE", "GROUP", "wc.failure-reader"),
        ("WRITE", "TOPIC", "wc.roots"),
        ("WRITE", "TOPIC", "wc.status"),
    }
    without_index = granted(
        role_acls("spout", "wc", principal="User:s", source_topics=["in"], group="g", root_index=False)
    )
    assert ("WRITE", "TOPIC", "wc.roots") not in without_index


def test_transactional_spout_writes_its_transactional_id_and_no_root_index():
    acls = granted(
        role_acls("spout", "wc", principal="User:s", source_topics=["in"], group="g", transactional_id="g.spout-1")
    )
    assert ("WRITE", "TRANSACTIONAL_ID", "g.spout-1") in acls
    assert ("DESCRIBE", "GROUP", "g.refetch") in acls
    assert ("WRITE", "TOPIC", "wc.roots") not in acls


def test_bolt_writes_acks_and_failures_but_reads_no_outcomes():
    acls = granted(
        role_acls(
            "bolt",
            "wc",
            principal="User:b",
            source_topics=["mid"],
            output_topics=["out"],
            group="g",
            transactional_id="g.b1",
        )
    )
    assert ("WRITE", "TOPIC", "wc.acks") in acls and ("WRITE", "TOPIC", "wc.failures") in acls
    assert ("WRITE", "TRANSACTIONAL_ID", "g.b1") in acls
    assert not any(name in ("wc.outcomes", "wc.dlq", "wc.roots") for _, _, name in acls)


def test_spark_job():
    acls = granted(role_acls("spark", "wc", principal="User:j", source_topics=["in"], output_topics=["out"], group="g"))
    assert {
        ("DESCRIBE", "GROUP", "g.rk-fetch"),
        ("READ", "TOPIC", "wc.outcomes"),
        ("WRITE", "TOPIC", "wc.dlq"),
        ("WRITE", "TOPIC", "wc.failures"),
        ("WRITE", "TOPIC", "out"),
    } <= acls


@pytest.mark.parametrize(
    "role, options, complaint",
    [
        ("spout", {"group": "g"}, "--source"),
        ("bolt", {"source_topics": ["a"]}, "--group"),
        ("acker", {"source_topics": ["a"]}, "--source"),
        ("acker", {"output_topics": ["a"]}, "--output"),
        ("spark", {"source_topics": ["a"], "group": "g", "transactional_id": "t"}, "--transactional-id"),
        ("bolt", {"source_topics": ["a"], "group": "g", "create_topics": True}, "--create-topics"),
        ("nimbus", {}, "unknown role"),
    ],
)
def test_missing_or_foreign_options_are_refused_by_name(role, options, complaint):
    with pytest.raises(ConfigError, match=complaint):
        role_acls(role, "wc", principal="User:x", **options)


def test_principal_must_have_a_type():
    with pytest.raises(ConfigError, match="TYPE:NAME"):
        role_acls("acker", "wc", principal="acker")


def test_every_name_is_one_confluent_kafka_knows():
    for rows in TABLE.values():
        for row in rows:
            getattr(ResourceType, row.resource_type)
            getattr(AclOperation, row.operation)
    acl = role_acls("acker", "wc", principal="User:a")[0]
    getattr(ResourcePatternType, acl.pattern_type)


names = st.text(alphabet="abcdefghij-_.0123456789", min_size=1, max_size=12)


@given(
    role=st.sampled_from(["spout", "bolt", "spark"]),
    topology=names,
    sources=st.lists(names, min_size=1, max_size=3),
    outputs=st.lists(names, max_size=3),
    group=names,
)
def test_grants_only_the_given_names_and_the_topologys_own(role, topology, sources, outputs, group):
    acls = role_acls(role, topology, principal="User:p", source_topics=sources, output_topics=outputs, group=group)
    assert acls == sorted(set(acls))
    for acl in acls:
        assert acl.principal == "User:p" and acl.pattern_type == "LITERAL"  # never a prefix or a wildcard
        if acl.resource_type == "TOPIC" and acl.operation == "READ" and acl.name in sources:
            continue
        assert (
            acl.name in sources
            or acl.name in outputs
            or acl.name == group
            or acl.name.startswith(f"{topology}.")
            or acl.name.startswith(f"{group}.")
        ), acl
    assert all(("WRITE", "TOPIC", topic) in granted(acls) for topic in outputs)
    assert all(("READ", "TOPIC", topic) in granted(acls) for topic in sources)


def test_docs_show_the_table():
    assert markdown_table() in DOCS.read_text(), (
        "docs/security.md must hold reliable_kafka.acls.markdown_table() verbatim; regenerate it with "
        "python -c 'from reliable_kafka.acls import markdown_table; print(markdown_table())'"
    )
    assert set(ROLES) == set(TABLE)


def test_cli_prints_one_line_per_acl_and_refuses_a_missing_name(capsys):
    from reliable_kafka.cli import main

    assert (
        main(["acls", "--topology", "wc", "--role", "bolt", "--principal", "User:b", "--source", "mid", "--group", "g"])
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(role_acls("bolt", "wc", principal="User:b", source_topics=["mid"], group="g"))
    assert any(line.split()[:5] == ["ALLOW", "User:b", "WRITE", "TOPIC", "wc.acks"] for line in lines)
    assert main(["acls", "--topology", "wc", "--role", "bolt", "--principal", "User:b", "--group", "g"]) == 1
    assert "--source" in capsys.readouterr().err
    assert main(["acls", "--topology", "wc", "--role", "acker", "--principal", "User:a", "--apply"]) == 1
    assert "--bootstrap-servers" in capsys.readouterr().err

"""One name per concept on the command line: ``--bootstrap-servers`` (``--bootstrap`` too) and
``--message-timeout-ms`` wherever they apply."""

import argparse

import pytest

from reliable_kafka.cli import build_parser

# every command that reaches Kafka, with the other arguments it requires
KAFKA_COMMANDS = {
    "acker": ["acker", "--topology", "t"],
    "status": ["status", "--topology", "t"],
    "ui": ["ui", "--topology", "t"],
    "lag": ["lag", "--group", "g", "--topic", "t"],
    "dlq list": ["dlq", "list", "--topology", "t"],
    "dlq show": ["dlq", "show", "--topology", "t", "7"],
    "dlq replay": ["dlq", "replay", "--topology", "t"],
    "trace": ["trace", "in:0@5", "--topology", "t"],
    "failures": ["failures", "--topology", "t"],
    "demo": ["demo"],
    "acls": ["acls", "--topology", "t", "--role", "acker", "--principal", "User:a"],
    "topics": ["topics", "--topology", "t"],
}


def _subcommands(parser: argparse.ArgumentParser, path=()):
    """(command path, parser) of every leaf command."""
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not actions:
        yield path, parser
        return
    for name, sub in actions[0].choices.items():
        yield from _subcommands(sub, (*path, name))


@pytest.mark.parametrize("command", sorted(KAFKA_COMMANDS))
@pytest.mark.parametrize("flag", ["--bootstrap-servers", "--bootstrap"])
def test_every_kafka_command_takes_bootstrap_servers_and_its_short_alias(command, flag):
    args = build_parser().parse_args([*KAFKA_COMMANDS[command], flag, "h1:9092,h2:9092"])
    assert args.bootstrap_servers == "h1:9092,h2:9092"


def test_the_list_above_is_every_command_that_has_a_bootstrap_option():
    having = {
        " ".join(path)
        for path, parser in _subcommands(build_parser())
        if any("--bootstrap-servers" in a.option_strings for a in parser._actions)
    }
    assert having == set(KAFKA_COMMANDS)


def test_commands_on_a_topology_share_one_set_of_connection_arguments():
    for path, parser in _subcommands(build_parser()):
        options = {o for a in parser._actions for o in a.option_strings}
        if "--topology" in options:
            assert {"--bootstrap-servers", "--bootstrap", "--kafka-config", "--command-config"} <= options, path


def test_no_command_spells_the_bootstrap_servers_another_way():
    for path, parser in _subcommands(build_parser()):
        for action in parser._actions:
            if any("bootstrap" in o for o in action.option_strings):
                assert action.option_strings == ["--bootstrap-servers", "--bootstrap"], path
                assert action.dest == "bootstrap_servers", path


@pytest.mark.parametrize("argv", [["acker", "--topology", "t", "--bootstrap-servers", "b"], ["chaos"]])
def test_message_timeout_ms_is_the_one_spelling(argv, capsys):
    assert build_parser().parse_args([*argv, "--message-timeout-ms", "1500"]).message_timeout_ms == 1500
    with pytest.raises(SystemExit):
        build_parser().parse_args([*argv, "--timeout-ms", "2500"])  # its old name, gone before the first release


def test_kafka_config_pairs_go_over_the_command_config_file(tmp_path):
    from reliable_kafka.cli.arguments import client_settings

    path = tmp_path / "c.properties"
    path.write_text("security.protocol=SASL_PLAINTEXT\nclient.id=from-file\n")
    args = build_parser().parse_args(
        [
            "status",
            "--topology",
            "t",
            "--bootstrap",
            "b",
            "--command-config",
            str(path),
            "--kafka-config",
            "client.id=given",
            "--kafka-config",
            "a=b",
        ]
    )
    assert client_settings(args) == {"security.protocol": "SASL_PLAINTEXT", "client.id": "given", "a": "b"}


def test_the_acker_command_builds_its_worker_with_the_library_names(monkeypatch):
    import reliable_kafka.acker as acker_package
    from reliable_kafka.cli import main

    built = {}

    class Recorder:
        def __init__(self, **kwargs):
            built.update(kwargs)

        def run(self, handle_signals):
            pass

    monkeypatch.setattr(acker_package, "AckerWorker", Recorder)
    assert (
        main(
            [
                "acker",
                "--topology",
                "t",
                "--bootstrap",
                "b:1",
                "--message-timeout-ms",
                "700",
                "--kafka-config",
                "linger.ms=5",
                "--log-level",
                "error",
            ]
        )
        == 0
    )
    assert built["connection"].bootstrap_servers == "b:1" and built["tracking"].message_timeout_ms == 700
    assert built["connection"].kafka_config == {"linger.ms": "5"}

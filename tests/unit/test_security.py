"""Translating librdkafka security settings into Spark's Kafka reader options."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliable_kafka import Connection
from reliable_kafka.errors import ConfigError
from reliable_kafka.security import spark_kafka_options


def test_no_security_settings_no_options():
    assert spark_kafka_options(None) == {}
    assert spark_kafka_options({"linger.ms": 5, "bootstrap.servers": "x"}) == {}


def test_sasl_scram():
    options = spark_kafka_options(
        {
            "security.protocol": "sasl_plaintext",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "spark-job",
            "sasl.password": "s3cret",
            "acks": "all",
        }
    )
    assert options == {
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="spark-job" password="s3cret";',
    }


def test_plain_via_the_plural_alias():
    options = spark_kafka_options(
        {"security.protocol": "SASL_SSL", "sasl.mechanisms": "plain", "sasl.username": "u", "sasl.password": "p"}
    )
    assert options["kafka.sasl.mechanism"] == "PLAIN"
    assert options["kafka.sasl.jaas.config"].startswith("org.apache.kafka.common.security.plain.PlainLoginModule")


def jaas_unquote(text: str) -> str:
    """What java.io.StreamTokenizer reads from a double-quoted token (backslash escapes)."""
    assert text[0] == '"'
    out, i = [], 1
    while text[i] != '"':
        if text[i] == "\\":
            i += 1
        out.append(text[i])
        i += 1
    return "".join(out)


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1))
def test_passwords_round_trip_through_jaas_quoting(password):
    jaas = spark_kafka_options({"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u", "sasl.password": password})[
        "kafka.sasl.jaas.config"
    ]
    quoted = jaas.split(" password=", 1)[1]
    assert jaas_unquote(quoted) == password
    assert quoted.endswith('";')


def test_ssl_files(tmp_path):
    (tmp_path / "client.pem").write_text("-----BEGIN CERTIFICATE-----\nabc\n-----END CERTIFICATE-----\n")
    (tmp_path / "client.key").write_text("-----BEGIN PRIVATE KEY-----\nxyz\n-----END PRIVATE KEY-----\n")
    options = spark_kafka_options(
        {
            "security.protocol": "ssl",
            "ssl.ca.location": "/etc/ca.pem",
            "ssl.certificate.location": str(tmp_path / "client.pem"),
            "ssl.key.location": str(tmp_path / "client.key"),
            "ssl.key.password": "kp",
            "ssl.endpoint.identification.algorithm": "none",
        }
    )
    assert options == {
        "kafka.security.protocol": "SSL",
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": "/etc/ca.pem",
        "kafka.ssl.keystore.type": "PEM",
        "kafka.ssl.keystore.certificate.chain": (tmp_path / "client.pem").read_text(),
        "kafka.ssl.keystore.key": (tmp_path / "client.key").read_text(),
        "kafka.ssl.key.password": "kp",
        "kafka.ssl.endpoint.identification.algorithm": "",
    }


def test_pkcs12_keystore():
    options = spark_kafka_options({"ssl.keystore.location": "/k.p12", "ssl.keystore.password": "pw"})
    assert options == {
        "kafka.ssl.keystore.type": "PKCS12",
        "kafka.ssl.keystore.location": "/k.p12",
        "kafka.ssl.keystore.password": "pw",
    }


@pytest.mark.parametrize(
    "config, words",
    [
        ({"sasl.username": "u", "sasl.password": "p"}, "sasl.mechanism"),
        ({"sasl.mechanism": "GSSAPI", "sasl.username": "u", "sasl.password": "p"}, "GSSAPI"),
        ({"sasl.mechanism": "PLAIN", "sasl.username": "u"}, "one is missing"),
        ({"sasl.mechanisms": "PLAIN,SCRAM-SHA-256"}, "exactly one"),
        ({"ssl.certificate.location": "/c.pem"}, "ssl.key.location"),
        ({"ssl.certificate.location": "/nope/c.pem", "ssl.key.location": "/nope/k.pem"}, "cannot read /nope/c.pem"),
    ],
)
def test_what_cannot_be_translated_is_a_clear_error(config, words):
    with pytest.raises(ConfigError, match="security") as error:
        spark_kafka_options(config)
    assert words in str(error.value)


def test_a_spark_job_hands_kafka_config_security_to_its_reader():
    from reliable_kafka.spark import SparkOptions, SparkSpout

    job = SparkSpout(
        None,
        topology="t",
        connection=Connection(
            "127.0.0.1:1",
            kafka_config={
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": "job",
                "sasl.password": "pw",
            },
        ),
        source_topics="s",
        group_id="g",
        checkpoint_dir="/tmp/none",
        transform=lambda df: df,
        output_topic="o",
        options=SparkOptions(spark_kafka_options={"kafka.sasl.mechanism": "SCRAM-SHA-512"}),
    )
    options = job.spark_kafka_options
    assert options["kafka.security.protocol"] == "SASL_PLAINTEXT"
    assert 'username="job" password="pw"' in options["kafka.sasl.jaas.config"]
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"  # given explicitly: wins
    assert options["kafka.isolation.level"] == "read_committed"


def test_command_config_round_trips_what_spark_gets(tmp_path):
    from reliable_kafka.security import read_command_config

    path = tmp_path / "client.properties"
    path.write_text(
        "# as for kafka-consumer-groups.sh --command-config\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="ops" password="p\\"w\\\\x";\n'
        "ssl.truststore.type=PEM\n"
        "ssl.truststore.location=/etc/ca.pem\n"
        "ssl.endpoint.identification.algorithm=\n"
        "client.id=rk-cli\n"
    )
    config = read_command_config(path)
    assert config == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "ops",
        "sasl.password": 'p"w\\x',
        "ssl.ca.location": "/etc/ca.pem",
        "ssl.endpoint.identification.algorithm": "none",
        "client.id": "rk-cli",
    }
    back = spark_kafka_options(config)
    assert back["kafka.sasl.jaas.config"].endswith('username="ops" password="p\\"w\\\\x";')


@pytest.mark.parametrize(
    "text, words",
    [
        ("ssl.truststore.location=/t.jks\n", "JKS"),
        ("ssl.keystore.location=/k.jks\n", "JKS"),
        ("sasl.jaas.config=com.sun.security.auth.module.Krb5LoginModule required;\n", "only PlainLoginModule"),
        (
            'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="u";\n',
            "password",
        ),
        ("no equals sign\n", ":1: expected key=value"),
    ],
)
def test_command_config_errors(tmp_path, text, words):
    from reliable_kafka.security import read_command_config

    (tmp_path / "c.properties").write_text(text)
    with pytest.raises(ConfigError) as error:
        read_command_config(tmp_path / "c.properties")
    assert words in str(error.value)


def test_cli_commands_take_a_command_config(tmp_path):
    from reliable_kafka.cli import _command_config, build_parser

    path = tmp_path / "c.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="a" password="b";\n'
    )
    for argv in (
        ["acker", "--topology", "t", "--bootstrap", "x"],
        ["lag", "--group", "g", "--topic", "t", "--bootstrap-servers", "x"],
    ):
        args = build_parser().parse_args([*argv, "--command-config", str(path)])
        assert _command_config(args) == {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "a",
            "sasl.password": "b",
        }

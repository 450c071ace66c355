"""The Helm chart's acker pod, run as Kubernetes would run it, in the local Docker engine.

``helm template`` renders the chart; the acker StatefulSet's container (image, command, args, env,
security context, volumes, probes) is run as written: ``$(VAR)`` references expanded from its
environment as the kubelet does, the pod name as ``metadata.name`` of the StatefulSet's first pod,
the pod's user, a read-only root filesystem with the ``emptyDir`` mounts as tmpfs, no
capabilities. The broker is the Kafka image on a network of the test's own (the acker reaches it
as the chart's ``bootstrapServers``); the word count runs on the host through it.

The probes are asked as the kubelet asks them (``httpGet`` path and port, ``timeoutSeconds``):
both pass while the acker folds the word count's acks; when the broker goes away readiness fails
(``cluster not reachable``) and liveness does not; when it is back, readiness passes again.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

from examples.word_count import build
from reliable_kafka import LocalCluster
from reliable_kafka.offsets import lag
from reliable_kafka.testing.records import produce_values
from reliable_kafka.testing.topics import create_topics

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "reliable-kafka"
RELEASE = "rk"
TOPOLOGY = "wordcount"  # examples.word_count's acks go to <topology>.acks


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def helm() -> str:
    done = subprocess.run([str(REPO / ".ci" / "helm.sh"), "--path"], capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, f".ci/helm.sh --path failed:\n{done.stderr[-3000:]}"
    return done.stdout.strip()


def render(*sets: str) -> list[dict]:
    args = [helm(), "template", RELEASE, str(CHART)]
    for setting in sets:
        args += ["--set", setting]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def expand(text: str, env: dict[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion (a name it does not know stays as written)."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), text)


def pod_env(container: dict, pod_name: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = expand(str(item["value"]), env)
        elif item.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[item["name"]] = pod_name
        else:
            pytest.fail(f"the test does not know how to resolve {item}")
    return env


class Probe:
    """One ``httpGet`` probe of the container, asked as the kubelet asks it."""

    def __init__(self, spec: dict, ports: dict[str, int], host_port: int) -> None:
        get = spec["httpGet"]
        port = get["port"]
        self.container_port = ports[port] if isinstance(port, str) else port
        self.url = f"http://127.0.0.1:{host_port}{get['path']}"
        self.timeout = spec.get("timeoutSeconds", 1)

    def __call__(self) -> tuple[bool, str]:
        # the kubelet: a status from 200 to 399 passes; anything else, or no answer in time, fails
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout) as response:
                return 200 <= response.status < 400, response.read().decode()
        except urllib.error.HTTPError as exc:
            return False, exc.read().decode()
        except OSError as exc:
            return False, str(exc)


def wait_for(condition, *, timeout: float, what: str, state=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout:.0f}s: {what}\n{state()}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def images(docker_engine):
    done = subprocess.run([str(REPO / "docker" / "build-images")], capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, f"docker/build-images failed:\n{done.stderr[-3000:]}"


@pytest.fixture
def network(docker_engine):
    net = docker_engine.networks.create(f"rk-helm-{uuid.uuid4().hex[:8]}", driver="bridge")
    try:
        yield net
    finally:
        net.remove()


@pytest.fixture
def kafka(docker_engine, images, network):
    """The Kafka image (non-root, with its HEALTHCHECK) on the test's network: ``kafka:19092``
    inside it, ``127.0.0.1:<port>`` from the host."""
    from reliable_kafka.jars import KAFKA_VERSION

    port = _free_port()
    container = docker_engine.containers.run(
        f"reliable-kafka/kafka:{KAFKA_VERSION}",
        name=f"kafka-{network.name}",
        detach=True,
        network=network.name,
        ports={"9092/tcp": ("127.0.0.1", port)},
        environment={
            "KAFKA_LISTENERS": "HOST://:9092,DOCKER://:19092,CONTROLLER://:9093",
            "KAFKA_ADVERTISED_LISTENERS": f"HOST://127.0.0.1:{port},DOCKER://kafka:19092",
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "HOST:PLAINTEXT,DOCKER:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "KAFKA_INTER_BROKER_LISTENER_NAME": "DOCKER",
            "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
        },
    )
    network.disconnect(container)
    network.connect(container, aliases=["kafka"])
    container.bootstrap = f"127.0.0.1:{port}"
    try:
        wait_for(
            lambda: _health(container) == "healthy",
            timeout=180,
            what="the Kafka container healthy (its HEALTHCHECK)",
            state=lambda: container.logs(tail=30).decode(errors="replace"),
        )
        yield container
    finally:
        container.remove(force=True)


def _health(container) -> str | None:
    container.reload()
    return container.attrs["State"].get("Health", {}).get("Status")


def test_the_kafka_image_runs_as_a_user_of_its_own(kafka):
    assert kafka.attrs["Config"]["User"] == "1000:1000"
    top = kafka.top(ps_args="-o pid,user,comm")
    users = {row[1] for row in top["Processes"] if "java" in row[2]}
    assert users and "root" not in users, top


def test_the_chart_acker_pod_runs_as_rendered_and_its_probes_answer_as_designed(docker_engine, network, kafka):
    metrics_port = 9400
    docs = render(
        f"topology.name={TOPOLOGY}",
        "topology.bootstrapServers=kafka:19092",
        "topology.ackers=2",
        "topology.replicationFactor=1",
        "ackers.replicas=2",
        f"metricsPort={metrics_port}",
    )
    (statefulset,) = [
        d for d in docs if d["kind"] == "StatefulSet" and d["metadata"]["name"] == f"{RELEASE}-{TOPOLOGY}-acker"
    ]
    pod = statefulset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    pod_name = f"{statefulset['metadata']['name']}-0"
    env = pod_env(container, pod_name)
    command = [expand(part, env) for part in container["command"]]
    args = [expand(part, env) for part in container["args"]]
    assert f"--name={pod_name}" in args  # the pod name is the member's stable name
    security, pod_security = container["securityContext"], pod["securityContext"]
    assert pod_security["runAsNonRoot"] and pod_security["runAsUser"] != 0
    empty_dirs = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    tmpfs = {m["mountPath"]: "" for m in container["volumeMounts"] if m["name"] in empty_dirs}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    host_port = _free_port()
    acker = docker_engine.containers.run(
        container["image"],
        entrypoint=command,
        command=args,
        environment=env,
        name=pod_name + "-" + network.name,
        hostname=pod_name,
        detach=True,
        network=network.name,
        ports={f"{ports['metrics']}/tcp": ("127.0.0.1", host_port)},
        user=f"{pod_security['runAsUser']}:{pod_security['runAsGroup']}",
        read_only=security["readOnlyRootFilesystem"],
        tmpfs=tmpfs,
        cap_drop=security["capabilities"]["drop"],
        security_opt=["no-new-privileges"] if not security["allowPrivilegeEscalation"] else [],
    )
    liveness = Probe(container["livenessProbe"], ports, host_port)
    readiness = Probe(container["readinessProbe"], ports, host_port)
    assert liveness.container_port == readiness.container_port == metrics_port

    def state() -> str:
        return f"liveness {liveness()}\nreadiness {readiness()}\n" + acker.logs(tail=30).decode(errors="replace")

    try:
        # ready: both ack partitions assigned to this one member, tables rebuilt, cluster answering
        wait_for(lambda: readiness()[0], timeout=180, what="the acker ready", state=state)
        assert liveness()[0], state()
        assert sorted(json.loads(readiness()[1])["partitions"]) == [f"{TOPOLOGY}.acks:0", f"{TOPOLOGY}.acks:1"]
        logs = acker.logs().decode(errors="replace")
        assert "CONFWARN" not in logs, logs  # --consumer-config reached the consumer only

        # while it folds: the word count on the host, its acks folded by the container
        bootstrap = kafka.bootstrap
        create_topics(bootstrap, {"sentences": 2, "words": 2, f"{TOPOLOGY}.sentences": 2})
        counts, components = build(bootstrap, topology=TOPOLOGY)
        host_side = components[1:]  # the spout and the two bolts: the acker is the container
        sentences = [f"alpha beta {i}" for i in range(300)]
        with LocalCluster(*host_side) as cluster:
            produce_values(bootstrap, "sentences", [s.encode() for s in sentences[:150]])
            seen_during = []
            wait_for(
                lambda: seen_during.append((liveness()[0], readiness()[0])) or counts["alpha"] >= 50,
                timeout=180,
                what="words counted through the container's acker",
                state=state,
            )
            produce_values(bootstrap, "sentences", [s.encode() for s in sentences[150:]])
            cluster.wait_until(
                lambda: lag(bootstrap, f"{TOPOLOGY}-spout", "sentences") == 0,
                timeout=300,
                what="every sentence done (its tree completed by the acker)",
            )
            assert liveness()[0] and readiness()[0], state()
            assert seen_during and all(live and ready for live, ready in seen_during), seen_during
        assert counts["alpha"] >= 300 and counts["beta"] >= 300
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{host_port}/metrics", timeout=10).read().decode()
        assert f'component="{pod_name}"' in metrics

        # the broker goes away: not ready (the cluster does not answer), still alive
        kafka.stop(timeout=10)
        wait_for(lambda: not readiness()[0], timeout=120, what="the acker not ready without a broker", state=state)
        assert "cluster not reachable" in readiness()[1], state()
        assert liveness()[0], state()
        time.sleep(2 * container["livenessProbe"]["periodSeconds"])  # a few more probes: still alive
        assert liveness()[0], state()
        acker.reload()
        assert acker.status == "running", state()

        # back: ready again, by itself
        kafka.start()
        wait_for(lambda: readiness()[0], timeout=180, what="the acker ready again", state=state)
        assert liveness()[0], state()
        wait_for(lambda: _health(acker) == "healthy", timeout=120, what="the image's HEALTHCHECK healthy", state=state)
    finally:
        acker.remove(force=True)

"""CreateTopics against a controller too slow for the request's timeout:
``partlog controller`` and one ``partlog broker --kafka-port`` process; the
controller is paused with SIGSTOP (a real stall, nothing mocked) and a
confluent-kafka create with a small ``operation_timeout`` gets
REQUEST_TIMED_OUT within about that time, as Kafka's controller answers
when a request's deadline passes.  Resumed, the controller creates the next
topic as usual."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from partlog.kafka.errors import Errors
from tests.cluster_helpers import free_ports, stop_processes, wait_listening

confluent_kafka = pytest.importorskip("confluent_kafka")


def _create(admin: Any, name: str, operation_timeout: float) -> tuple[int, str]:
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    f = admin.create_topics([NewTopic(name, 1, 1)], operation_timeout=operation_timeout, request_timeout=30)
    try:
        f[name].result(30)
    except confluent_kafka.KafkaException as e:
        return int(e.args[0].code()), str(e.args[0].str())
    return 0, ""


@pytest.mark.timeout(120)
def test_a_paused_controller_times_the_create_out(tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient

    ctl_port, rpc_port, kafka_port = free_ports(3)
    logs = tmp_path / "logs"
    logs.mkdir()

    def spawn(name: str, args: list[str]) -> subprocess.Popen[bytes]:
        with open(logs / f"{name}.log", "ab") as out:
            return subprocess.Popen([sys.executable, "-m", "partlog.tools.cli", *args], stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip

    procs = {"controller": spawn("controller", ["controller", "--data-dir", str(tmp_path / "ctl"),
                                                "--port", str(ctl_port)])}  # fmt: skip
    try:
        wait_listening(ctl_port, procs["controller"])
        procs["broker"] = spawn("broker", [
            "broker", "--controller", f"127.0.0.1:{ctl_port}", "--id", "1", "--az", "az1", "--port", str(rpc_port),
            "--kafka-port", str(kafka_port), "--data-dir", str(tmp_path), "--store", f"file://{tmp_path}/objects",
            "--no-sync",
        ])  # fmt: skip
        wait_listening(kafka_port, procs["broker"])
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{kafka_port}"})
        assert _create(admin, "before", 30)[0] == 0
        procs["controller"].send_signal(signal.SIGSTOP)
        try:
            code, message = _create(admin, "stalled", 1.0)
            assert code == Errors.REQUEST_TIMED_OUT
            # The request's own bound (the front end's or, what is left of it, the
            # controller call's), not the controller client's fixed 5 s call timeout.
            assert "ms: the topic may still be created" in message, message
        finally:
            procs["controller"].send_signal(signal.SIGCONT)
        assert _create(admin, "after", 30)[0] == 0
    finally:
        stop_processes(list(procs.values()))

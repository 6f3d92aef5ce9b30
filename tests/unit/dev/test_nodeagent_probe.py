"""Probe specs and the kubelet's success/failure thresholds."""

import pytest

from mwms_dev.nodeagent_probe import Probe, ProbeError, Thresholds, check, parse_probe


def test_http_probe_with_a_named_port_and_defaults():
    probe = parse_probe(
        {"httpGet": {"path": "/healthz", "port": "http"}}, [{"name": "http", "containerPort": 8080}], "p"
    )
    assert probe == Probe(kind="httpGet", port=8080, path="/healthz")
    assert (probe.period, probe.timeout, probe.failure_threshold, probe.success_threshold) == (10, 1, 3, 1)


def test_tcp_and_exec_probes():
    assert parse_probe({"tcpSocket": {"port": 2222}, "periodSeconds": 2}, [], "p").port == 2222
    assert parse_probe({"exec": {"command": ["cat", "/ready"]}}, [], "p").command == ("cat", "/ready")


@pytest.mark.parametrize(
    ("probe", "message"),
    [
        ({"httpGet": {"port": "web"}}, "p.httpGet.port: no container port named 'web'"),
        ({"grpc": {"port": 1}}, "only httpGet, tcpSocket and exec"),
        ({"exec": {"command": []}}, "p.exec.command: empty"),
    ],
)
def test_bad_probes_name_the_field(probe, message):
    with pytest.raises(ProbeError, match=message.replace("(", r"\(")):
        parse_probe(probe, [], "p")


def test_thresholds_need_consecutive_results():
    t = Thresholds(Probe(kind="exec", command=("x",), failure_threshold=3, success_threshold=2), initial=True)
    assert [t.record(r) for r in (False, False, True, False, False, False)] == [True] * 5 + [False]
    assert [t.record(r) for r in (True, False, True, True)] == [False, False, False, True]


def test_a_failed_exec_probe_says_what_its_command_printed_as_the_kubelet_does():
    probe = Probe(kind="exec", command=("sh", "-c", "echo not yet; exit 1"))
    assert check(probe, "", lambda command, timeout: (1, "not yet\n")) == (False, "not yet\n")
    assert check(probe, "", lambda command, timeout: (0, "joined\n")) == (True, "joined\n")

"""The launcher's pure parts: pod network per subnet index, certificates, kubeconfigs, process tracking."""

import base64
import ipaddress
import subprocess
import sys
import time

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mwms_dev import pki
from mwms_dev.cluster import CLIENTS, LocalCluster, kubeconfig
from mwms_dev.network import pod_network
from mwms_dev.procs import Supervisor, pid_alive


def test_each_subnet_index_gets_its_own_bridge_and_gateway():
    net = pod_network(3)
    assert (net.bridge, net.gateway, net.subnet) == ("mwbr3", "10.203.0.1", "10.203.0.0/16")
    assert net.prefix_len == 16
    assert net.kubernetes_service_ip == "10.96.0.1"


@pytest.mark.parametrize("index", [-1, 56, "1", 1.0])
def test_subnet_index_out_of_range_is_refused_naming_it(index):
    with pytest.raises(ValueError, match="subnet_index"):
        pod_network(index)
    with pytest.raises(ValueError, match="subnet_index"):
        LocalCluster(subnet_index=index)


def test_api_server_cert_names_every_address_pods_and_clients_use(tmp_path):
    files = pki.write_cluster_pki(tmp_path, api_ips=("127.0.0.1", "10.201.0.1", "10.96.0.1"), clients=CLIENTS)
    cert = x509.load_pem_x509_certificate(files.apiserver_cert.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(ip) for ip in san.get_values_for_type(x509.IPAddress)} == {
        "127.0.0.1",
        "10.201.0.1",
        "10.96.0.1",
    }
    assert set(san.get_values_for_type(x509.DNSName)) >= {
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    }
    ca = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
    cert.verify_directly_issued_by(ca)
    assert files.sa_key.stat().st_mode & 0o077 == 0


def test_client_certs_carry_user_and_groups(tmp_path):
    files = pki.write_cluster_pki(tmp_path, api_ips=("127.0.0.1",), clients=CLIENTS)
    admin = x509.load_pem_x509_certificate(files.clients["admin"][0].read_bytes())
    assert [a.value for a in admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == [
        "system:masters"
    ]
    kcm = x509.load_pem_x509_certificate(files.clients["controller-manager"][0].read_bytes())
    assert (
        kcm.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:kube-controller-manager"
    )
    usage = kcm.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_kubeconfig_embeds_its_credentials():
    config = kubeconfig("https://127.0.0.1:6443", b"CA", b"CERT", b"KEY", "mwms-admin")
    cluster = config["clusters"][0]["cluster"]
    assert cluster["server"] == "https://127.0.0.1:6443"
    assert base64.b64decode(cluster["certificate-authority-data"]) == b"CA"
    user = config["users"][0]["user"]
    assert base64.b64decode(user["client-key-data"]) == b"KEY"
    assert config["current-context"] == config["contexts"][0]["name"]


def test_supervisor_stops_a_process_and_the_children_it_started(tmp_path):
    supervisor = Supervisor("unit-test-not-a-cluster")
    supervisor.cgroup.enabled = False  # only the process group mechanism here
    code = (
        "import subprocess, sys, time;"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
        "time.sleep(60)"
    )
    proc = supervisor.spawn("parent", [sys.executable, "-c", code], tmp_path / "parent.log")
    for _ in range(100):
        children = subprocess.run(
            ["pgrep", "-P", str(proc.pid)], capture_output=True, text=True
        ).stdout.split()
        if children:
            break
        time.sleep(0.05)
    assert children
    supervisor.stop_all(timeout=5)
    assert not pid_alive(proc.pid)
    assert not any(pid_alive(int(c)) for c in children)


def test_the_gateway_is_a_host_address_of_the_subnet():
    for index in (0, 55):
        net = pod_network(index)
        assert ipaddress.ip_address(net.gateway) in ipaddress.ip_network(net.subnet)

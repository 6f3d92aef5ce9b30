"""The node agent's /etc/hosts: pod FQDNs and Service names a pod can resolve without a DNS server."""

from mwms_dev.nodeagent_hosts import PodEntry, ServiceEntry, hosts_file, resolv_conf


def _lines(text: str) -> dict[str, list[str]]:
    """name -> IPs, in file order."""
    names: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            ip, *rest = line.split()
            for name in rest:
                names.setdefault(name, []).append(ip)
    return names


W0 = PodEntry("ns1", "job-worker-0", "10.200.0.2", "job-worker-0", "job", {"app": "job"})
W1 = PodEntry("ns1", "job-worker-1", "10.200.0.3", "job-worker-1", "job", {"app": "job"})
OTHER = PodEntry("ns2", "x-0", "10.200.0.9", "x-0", "x", {"app": "job"})
PLAIN = PodEntry("ns1", "plain", "10.200.0.4")


def test_pods_resolve_each_other_by_every_form_of_their_fqdn():
    names = _lines(hosts_file(own=W0, pods=[W0, W1, PLAIN], services=[], api_host="10.200.0.1"))
    for name in (
        "job-worker-1.job.ns1.svc.cluster.local",
        "job-worker-1.job.ns1.svc",
        "job-worker-1.job.ns1",
        "job-worker-1.job",
    ):
        assert names[name] == ["10.200.0.3"], name
    assert names["job-worker-0.job"] == ["10.200.0.2"]
    assert names["job-worker-0"] == ["10.200.0.2"]  # own short hostname
    assert "plain" not in names  # no hostname+subdomain: no DNS name (only its own short name, for itself)


def test_own_address_comes_first():
    text = hosts_file(own=W1, pods=[W0, W1], services=[], api_host="10.200.0.1")
    entries = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert entries[2].split()[0] == "10.200.0.3"


def test_other_namespaces_only_get_qualified_names():
    names = _lines(hosts_file(own=W0, pods=[W0, OTHER], services=[], api_host="10.200.0.1"))
    assert names["x-0.x.ns2.svc.cluster.local"] == ["10.200.0.9"]
    assert names["x-0.x.ns2"] == ["10.200.0.9"]
    assert "x-0.x" not in names


def test_service_names_map_to_every_selected_pod_of_its_namespace():
    svc = ServiceEntry("ns1", "job", {"app": "job"})
    names = _lines(hosts_file(own=W0, pods=[W0, W1, OTHER, PLAIN], services=[svc], api_host="10.200.0.1"))
    for name in ("job", "job.ns1", "job.ns1.svc", "job.ns1.svc.cluster.local"):
        assert sorted(names[name]) == ["10.200.0.2", "10.200.0.3"], name


def test_service_without_selector_selects_nothing():
    svc = ServiceEntry("ns1", "manual", {})
    assert "manual" not in _lines(hosts_file(own=W0, pods=[W0, W1], services=[svc], api_host="10.200.0.1"))


def test_kubernetes_names_point_at_the_api_host():
    names = _lines(hosts_file(own=W0, pods=[W0], services=[], api_host="10.200.0.1"))
    for name in (
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ):
        assert names[name] == ["10.200.0.1"]
    assert names["localhost"] == ["127.0.0.1", "::1"]


def test_resolv_conf_points_at_loopback_so_unknown_names_fail_fast():
    assert "nameserver 127.0.0.1" in resolv_conf()

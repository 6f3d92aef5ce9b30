"""Pod IP allocation on the cluster bridge."""

import pytest

from mwms_dev.nodeagent_ipam import AddressesExhausted, Ipam, next_free


def test_first_address_skips_network_and_gateway():
    assert next_free("10.200.0.0/16", "10.200.0.1", set()) == "10.200.0.2"


def test_round_robin_after_the_last_and_wraps_around():
    assert next_free("10.200.0.0/29", "10.200.0.1", set(), after="10.200.0.3") == "10.200.0.4"
    # .7 is broadcast, .1 the gateway: after .6 comes .2
    assert next_free("10.200.0.0/29", "10.200.0.1", set(), after="10.200.0.6") == "10.200.0.2"


def test_used_addresses_are_skipped_and_exhaustion_is_an_error():
    used = {f"10.200.0.{i}" for i in range(2, 7)}
    with pytest.raises(AddressesExhausted):
        next_free("10.200.0.0/29", "10.200.0.1", used)
    used.discard("10.200.0.5")
    assert next_free("10.200.0.0/29", "10.200.0.1", used) == "10.200.0.5"


def test_reservations_are_exclusive_and_released_by_their_owner(tmp_path):
    a = Ipam("br", "10.200.0.0/29", "10.200.0.1", root=tmp_path, netns_exists=lambda n: True)
    b = Ipam("br", "10.200.0.0/29", "10.200.0.1", root=tmp_path, netns_exists=lambda n: True)
    ips = {a.reserve("ns-a1"), b.reserve("ns-b1"), a.reserve("ns-a2")}
    assert len(ips) == 3 and "10.200.0.1" not in ips
    ip = sorted(ips)[0]
    owner = (tmp_path / "br" / ip).read_text()
    a.release(ip, "someone-else")
    assert (tmp_path / "br" / ip).exists()
    a.release(ip, owner)
    assert not (tmp_path / "br" / ip).exists()


def test_reservations_of_vanished_namespaces_are_reclaimed(tmp_path):
    import os

    alive = {"ns-live"}
    ipam = Ipam("br", "10.200.0.0/29", "10.200.0.1", root=tmp_path, netns_exists=lambda n: n in alive)
    live, dead, mine = ipam.reserve("ns-live"), ipam.reserve("ns-dead"), ipam.reserve("br-node-1-uid")
    assert ipam.reclaim_stale() == 0  # too young to be stale
    for ip in (live, dead):
        os.utime(tmp_path / "br" / ip, (0, 0))
    assert ipam.reclaim_stale(force_prefix="br-node-1-") == 2
    assert sorted(p.name for p in (tmp_path / "br").iterdir()) == [live]
    assert mine != live

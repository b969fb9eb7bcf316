"""Pure tests of interface scoping and reachability ranking (no network)."""

from __future__ import annotations

import ipaddress

import pytest

from zmesh.interfaces import (
    HostInterface,
    InterfaceScope,
    list_host_interfaces,
    rank_reachable,
    resolve_interfaces,
)

pytestmark = pytest.mark.timeout(10)


def _hi(name: str, cidr: str, *, up: bool = True) -> HostInterface:
    iface = ipaddress.IPv4Interface(cidr)
    return HostInterface(
        name=name,
        interface=iface,
        is_up=up,
        is_loopback=iface.ip in ipaddress.IPv4Network("127.0.0.0/8"),
    )


HOST = (
    _hi("lo", "127.0.0.1/8"),
    _hi("eth0", "10.9.0.2/24"),
    _hi("eth1", "192.168.50.7/24"),
    _hi("docker0", "172.17.0.1/16", up=False),
)


def test_local_is_loopback_only() -> None:
    scope = resolve_interfaces("local", host_interfaces=HOST)
    assert scope.addresses == ("127.0.0.1",)
    assert scope.is_local and scope.mode == "local" and scope.has_loopback
    assert scope.networks == (ipaddress.IPv4Interface("127.0.0.1/8"),)


def test_default_is_local_and_env_var_is_read() -> None:
    assert resolve_interfaces(environ={}, host_interfaces=HOST).mode == "local"
    assert resolve_interfaces(environ={"ZMESH_INTERFACES": "  "}, host_interfaces=HOST).mode == "local"
    scope = resolve_interfaces(environ={"ZMESH_INTERFACES": "eth1, 127.0.0.1"}, host_interfaces=HOST)
    assert scope.addresses == ("192.168.50.7", "127.0.0.1")
    assert scope.mode == "explicit" and not scope.is_local


def test_explicit_argument_wins_over_env() -> None:
    scope = resolve_interfaces("10.9.0.2", environ={"ZMESH_INTERFACES": "lan"}, host_interfaces=HOST)
    assert scope.addresses == ("10.9.0.2",)
    assert scope.networks == (ipaddress.IPv4Interface("10.9.0.2/24"),)
    assert not scope.is_local and scope.mode == "explicit"


def test_explicit_loopback_address_is_local() -> None:
    scope = resolve_interfaces(["127.0.0.1"], host_interfaces=HOST)
    assert scope.is_local and scope.mode == "explicit"


def test_interface_name_and_dedup() -> None:
    scope = resolve_interfaces(["eth0", "10.9.0.2,eth1"], host_interfaces=HOST)
    assert scope.addresses == ("10.9.0.2", "192.168.50.7")


def test_lan_excludes_loopback_and_down_interfaces() -> None:
    scope = resolve_interfaces("LAN", host_interfaces=HOST)
    assert scope.addresses == ("10.9.0.2", "192.168.50.7")
    assert scope.mode == "lan" and not scope.is_local and not scope.has_loopback


def test_lan_without_interfaces_errors() -> None:
    with pytest.raises(ValueError, match="no up, non-loopback"):
        resolve_interfaces("lan", host_interfaces=HOST[:1])


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("wlan9", "'wlan9': unknown interface"),
        ("10.1.2.3", "'10.1.2.3': address is not on this host"),
        ("::1", "IPv6 is not supported"),
        ("fe80::1", "IPv6 is not supported"),
        ("", "empty interface spec"),
        ("eth0,,eth1", "empty interface spec"),
        ([], "empty interface spec"),
        ("docker0", "'docker0': interface is down"),
        ("172.17.0.1", "interface docker0 is down"),
    ],
)
def test_bad_specs_name_the_item_and_list_interfaces(spec: str | list[str], match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        resolve_interfaces(spec, host_interfaces=HOST)
    if not match.startswith("empty"):
        assert "eth0=10.9.0.2" in str(info.value)  # the available interfaces are listed


def test_real_host_local_and_loopback_resolve() -> None:
    assert any(h.interface.ip == ipaddress.IPv4Address("127.0.0.1") for h in list_host_interfaces())
    assert resolve_interfaces("127.0.0.1").addresses == ("127.0.0.1",)
    assert resolve_interfaces("lo").is_local
    with pytest.raises(ValueError, match="zz-no-such-if"):
        resolve_interfaces("zz-no-such-if")


def _scope(*cidrs: str, mode: str = "explicit") -> InterfaceScope:
    nets = tuple(ipaddress.IPv4Interface(c) for c in cidrs)
    return InterfaceScope(
        addresses=tuple(str(n.ip) for n in nets),
        networks=nets,
        is_local=all(n.ip.is_loopback for n in nets),
        mode=mode,
    )


def test_rank_never_returns_loopback_to_lan_scope() -> None:
    lan = _scope("10.9.0.2/24", mode="lan")
    assert rank_reachable(["127.0.0.1"], lan) == []
    assert rank_reachable(["127.0.0.1", "10.9.0.5", "127.0.1.1"], lan) == ["10.9.0.5"]


def test_rank_prefers_same_subnet_and_drops_unreachable() -> None:
    lan = _scope("10.9.0.2/24", "192.168.50.7/24", mode="lan")
    peer = ["172.17.0.1", "192.168.50.9", "10.9.0.5", "fe80::1", "garbage", "10.9.0.5"]
    # our first network wins, then our second; docker/IPv6/garbage/duplicates are dropped
    assert rank_reachable(peer, lan) == ["10.9.0.5", "192.168.50.9"]
    assert rank_reachable(["172.17.0.1", "10.10.0.1"], lan) == []


def test_rank_local_scope_only_loopback() -> None:
    local = resolve_interfaces("local")
    assert rank_reachable(["10.9.0.5", "127.0.0.1"], local) == ["127.0.0.1"]
    assert rank_reachable(["10.9.0.5"], local) == []


def test_rank_mixed_scope_puts_loopback_last() -> None:
    mixed = _scope("10.9.0.2/24", "127.0.0.1/8")
    assert rank_reachable(["127.0.0.1", "10.9.0.7"], mixed) == ["10.9.0.7", "127.0.0.1"]

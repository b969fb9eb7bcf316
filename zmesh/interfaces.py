"""Network interface scoping: which IPv4 addresses a node binds and advertises.

A node never talks on every interface by default.  The scope is chosen with a
spec (argument or the ``ZMESH_INTERFACES`` environment variable):

``"local"`` (the default)
    127.0.0.1 only: nothing leaves the host.
``"lan"``
    every up, non-loopback IPv4 interface of the host.
a list of interface names and/or IPv4 addresses
    e.g. ``"eth0"``, ``"10.9.0.2"``, ``"127.0.0.1"``, or ``"eth0,127.0.0.1"``.

:func:`rank_reachable` then picks, among the addresses a peer advertises, the
ones this node can actually reach, best first, so that a multi-homed peer
advertising an address on a network we are not on (docker0, a VPN, a second
NIC) never becomes the address we dial.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import ifaddr

__all__ = [
    "ENV_VAR",
    "HostInterface",
    "InterfaceScope",
    "list_host_interfaces",
    "rank_reachable",
    "resolve_interfaces",
]

ENV_VAR = "ZMESH_INTERFACES"
"""Environment variable read when no spec is given."""

_DEFAULT_SPEC = "local"
_LOOPBACK_NET = ipaddress.IPv4Network("127.0.0.0/8")
_IFF_UP = 0x1
_IFF_LOOPBACK = 0x8


@dataclass(frozen=True)
class HostInterface:
    """One IPv4 address of one network interface of this host."""

    name: str
    interface: ipaddress.IPv4Interface
    is_up: bool
    is_loopback: bool


@dataclass(frozen=True)
class InterfaceScope:
    """The resolved set of IPv4 addresses a node binds and advertises.

    ``addresses`` keeps the order of the spec; ``networks`` holds the same
    addresses with their prefix length, used for reachability decisions.
    """

    addresses: tuple[str, ...]
    networks: tuple[ipaddress.IPv4Interface, ...]
    is_local: bool
    mode: str

    @property
    def has_loopback(self) -> bool:
        """True when at least one address of the scope is a loopback address."""
        return any(net.ip in _LOOPBACK_NET for net in self.networks)


def _read_flags(name: str) -> int | None:
    """Return the kernel interface flags of ``name`` (Linux sysfs), or None."""
    try:
        with open(f"/sys/class/net/{name}/flags", encoding="ascii") as fh:
            return int(fh.read().strip(), 16)
    except (OSError, ValueError):
        return None


def list_host_interfaces() -> list[HostInterface]:
    """List every IPv4 address of every interface of this host (via ``ifaddr``).

    Up/down state and the loopback flag come from sysfs when available; where
    it is not (non-Linux), interfaces are assumed up and loopback is inferred
    from the 127.0.0.0/8 address range.
    """
    result: list[HostInterface] = []
    for adapter in ifaddr.get_adapters():
        name = str(adapter.name)
        flags = _read_flags(name)
        for ip in adapter.ips:
            if not isinstance(ip.ip, str):  # IPv6 entries are tuples
                continue
            try:
                iface = ipaddress.IPv4Interface(f"{ip.ip}/{ip.network_prefix}")
            except ValueError:
                continue
            is_loopback = iface.ip in _LOOPBACK_NET or bool(flags is not None and flags & _IFF_LOOPBACK)
            is_up = True if flags is None else bool(flags & _IFF_UP)
            result.append(HostInterface(name=name, interface=iface, is_up=is_up, is_loopback=is_loopback))
    return result


def _describe(host: Sequence[HostInterface]) -> str:
    """Human-readable list of available interfaces for error messages."""
    if not host:
        return "none"
    return ", ".join(
        f"{h.name}={h.interface.ip}{'' if h.is_up else ' (down)'}" for h in host
    )


def _split_spec(spec: str | Sequence[str]) -> list[str]:
    """Normalise a spec into a list of non-empty stripped items."""
    raw: list[str] = []
    if isinstance(spec, str):
        raw = spec.split(",")
    else:
        for item in spec:
            if not isinstance(item, str):
                raise ValueError(f"interface spec items must be strings, got {item!r}")
            raw.extend(item.split(","))
    items = [item.strip() for item in raw]
    if not items or any(not item for item in items):
        raise ValueError(
            f"empty interface spec item in {spec!r}; expected 'local', 'lan', "
            "interface names or IPv4 addresses"
        )
    return items


def _resolve_item(item: str, host: Sequence[HostInterface]) -> list[ipaddress.IPv4Interface]:
    """Resolve one spec item (keyword, address or interface name) to addresses."""
    keyword = item.lower()
    if keyword == "local":
        return [ipaddress.IPv4Interface("127.0.0.1/8")]
    if keyword == "lan":
        lan = [h.interface for h in host if h.is_up and not h.is_loopback]
        if not lan:
            raise ValueError(
                f"'lan': no up, non-loopback IPv4 interface on this host; available: {_describe(host)}"
            )
        return lan
    try:
        addr = ipaddress.ip_address(item)
    except ValueError:
        addr = None
    if isinstance(addr, ipaddress.IPv6Address):
        raise ValueError(f"{item!r}: IPv6 is not supported, use an IPv4 address; available: {_describe(host)}")
    if isinstance(addr, ipaddress.IPv4Address):
        for h in host:
            if h.interface.ip == addr:
                if not h.is_up:
                    raise ValueError(f"{item!r}: interface {h.name} is down; available: {_describe(host)}")
                return [h.interface]
        raise ValueError(f"{item!r}: address is not on this host; available: {_describe(host)}")
    matches = [h for h in host if h.name == item]
    if not matches:
        raise ValueError(f"{item!r}: unknown interface (or it has no IPv4 address); available: {_describe(host)}")
    up = [h.interface for h in matches if h.is_up]
    if not up:
        raise ValueError(f"{item!r}: interface is down; available: {_describe(host)}")
    return up


def resolve_interfaces(
    spec: str | Sequence[str] | None = None,
    *,
    environ: Mapping[str, str] = os.environ,
    host_interfaces: Sequence[HostInterface] | None = None,
) -> InterfaceScope:
    """Resolve an interface spec into an :class:`InterfaceScope`.

    ``spec`` None reads ``ZMESH_INTERFACES`` from ``environ`` (an unset or
    blank variable means ``"local"``).  ``host_interfaces`` overrides the
    host's interface list (for tests); by default :func:`list_host_interfaces`
    is consulted, and only when the spec needs it.

    Raises ValueError naming the bad item and the available interfaces for an
    unknown name, an address not on this host, an IPv6 address, a down
    interface or an empty spec.
    """
    if spec is None:
        env_value = environ.get(ENV_VAR, "")
        spec = env_value if env_value.strip() else _DEFAULT_SPEC
    items = _split_spec(spec)
    keywords = [item.lower() for item in items]
    host: Sequence[HostInterface] = ()
    if keywords != ["local"]:
        host = list_host_interfaces() if host_interfaces is None else host_interfaces
    networks: list[ipaddress.IPv4Interface] = []
    for item in items:
        for iface in _resolve_item(item, host):
            if all(iface.ip != known.ip for known in networks):
                networks.append(iface)
    if keywords == ["local"]:
        mode = "local"
    elif keywords == ["lan"]:
        mode = "lan"
    else:
        mode = "explicit"
    return InterfaceScope(
        addresses=tuple(str(net.ip) for net in networks),
        networks=tuple(networks),
        is_local=all(net.ip in _LOOPBACK_NET for net in networks),
        mode=mode,
    )


def rank_reachable(candidates: Sequence[str], scope: InterfaceScope) -> list[str]:
    """Return the peer addresses we can reach from ``scope``, best first.

    A candidate is reachable when it lies inside one of our networks (same
    subnet as one of our scope addresses).  Non-loopback matches come first,
    in the order of our networks, then the candidate order; loopback
    candidates are kept only when our scope itself contains a loopback
    address, and are ranked last (a loopback address only reaches a peer on
    this very host).  Anything else (other subnets, IPv6, garbage) is dropped:
    mDNS is link-local, so a peer heard on a link we share always has an
    address on that link, and dialling an off-link address is exactly the
    multi-homed churn this avoids.
    """
    ranked: list[tuple[int, int, int, str]] = []
    seen: set[ipaddress.IPv4Address] = set()
    for position, candidate in enumerate(candidates):
        try:
            addr = ipaddress.ip_address(candidate.strip())
        except (ValueError, AttributeError):
            continue
        if not isinstance(addr, ipaddress.IPv4Address) or addr in seen:
            continue
        seen.add(addr)
        is_loopback = addr in _LOOPBACK_NET
        for net_index, net in enumerate(scope.networks):
            net_is_loopback = net.ip in _LOOPBACK_NET
            if is_loopback != net_is_loopback:
                continue
            if is_loopback or addr in net.network:
                ranked.append((int(is_loopback), net_index, position, str(addr)))
                break
    ranked.sort()
    return [entry[3] for entry in ranked]

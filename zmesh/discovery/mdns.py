"""mDNS / DNS-SD peer discovery for zmesh, on python-zeroconf's asyncio API.

Each node registers one ``_zmesh._tcp.local.`` service and browses the same
type.  The TXT record carries only what a peer needs to dial us::

    mesh=<mesh name> node=<node id> inc=<incarnation> v=<protocol version>
    rp=<ROUTER port> pp=<PUB port> [ck=<CurveZMQ public key, Z85: keyed nodes>]

A keyed node's endpoints carry its public key (``tcp://host:port#KEY``), so a
peer can dial it as a CURVE client; whether it may is the peer's trusted set.

Addresses come from the service's A records and are filtered/ranked with
:func:`zmesh.interfaces.rank_reachable`, so a multi-homed peer is dialled on
an address we can actually reach.

Joining is fast: the browser starts first, registration skips RFC 6762
probing (the instance name embeds the node id and an incarnation hash, so it
is unique by construction) and runs as a background task.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any

from zeroconf import IPVersion, ServiceInfo, ServiceStateChange
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

from .._wire.names import printable
from ..security import check_public_key
from ..interfaces import InterfaceScope
from .adverts import MAX_TXT_ENTRY, Malformed, PeerAdvert, check_port, instance_label, parse_advert, txt_entry_ok
from .sockets import confine_to_scope

__all__ = ["MdnsDiscovery", "PeerAdvert", "instance_label"]

_LOG = logging.getLogger("zmesh.discovery")
_RESOLVE_TIMEOUT_MS = 3000
_REGISTER_ATTEMPTS = 3
_REGISTER_RETRY = 0.5  # seconds before the second attempt; twice that before the third


def _keep_own_questions(zc: Any, scope: InterfaceScope) -> None:
    """Let only our own questions suppress our queries when ``scope`` spans interfaces.

    zeroconf skips a query when another querier asked the same question
    within the last second with no known answer we lack (RFC 6762 7.3:
    its answers reach us too). Its history does not say on which interface
    a question was heard, so for a 'lan,local' node a 'local' neighbour's
    question on 127.0.0.1 silenced its LAN query, whose answers never came:
    neighbours that started within a second of each other keep that phase
    (queries at +0, 1, 5 and 14 s), so every startup query but the first (QU,
    whose unicast answers another process on this host may receive) was
    skipped, and LAN peers stayed unknown until the next refresh, an hour on.
    A history of our own (the one zeroconf's browser and resolver consult)
    records only what we asked; the query handler keeps the shared one.
    """
    if len(scope.addresses) > 1:
        zc.question_history = type(zc.question_history)()


class MdnsDiscovery:
    """Advertise this node and report peers of the same mesh over mDNS.

    ``on_peer`` is called (on the event loop) once per appearance of a peer
    (node id, incarnation); a restart (new incarnation) is reported again.
    ``on_peer_gone`` is called with the node id when its last advertised
    service is withdrawn (goodbye or expiry); it is a hint only, liveness is
    the mesh's job.  ``stats`` counts what was seen and ignored.
    """

    SERVICE_TYPE = "_zmesh._tcp.local."

    def __init__(
        self,
        *,
        mesh: str,
        node_id: str,
        incarnation: str,
        version: int,
        scope: InterfaceScope,
        router_port: int,
        pub_port: int,
        on_peer: Callable[[PeerAdvert], None],
        on_peer_gone: Callable[[str], None] | None = None,
        logger: logging.Logger | None = None,
        public_key: str | None = None,
    ) -> None:
        """Validate the advert; nothing touches the network until :meth:`start`."""
        for key, value in (("mesh", mesh), ("node", node_id), ("inc", incarnation)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"{key} must be a non-empty string, got {value!r}")
            if not txt_entry_ok(key, value):
                raise ValueError(
                    f"{key} is too long for an mDNS TXT entry "
                    f"({len(value.encode())} bytes, max {MAX_TXT_ENTRY - len(key) - 1})"
                )
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise ValueError(f"version must be a non-negative int, got {version!r}")
        check_port("router_port", router_port)
        check_port("pub_port", pub_port)
        if not scope.addresses:
            raise ValueError("interface scope has no address")
        self.mesh = mesh
        self.node_id = node_id
        self.incarnation = incarnation
        self.version = version
        self.scope = scope
        self.router_port = router_port
        self.pub_port = pub_port
        self.public_key = check_public_key(public_key) if public_key is not None else None
        self._on_peer = on_peer
        self._on_peer_gone = on_peer_gone
        self._log = logger or _LOG
        self.service_name = f"{instance_label(node_id, incarnation, mesh)}.{self.SERVICE_TYPE}"
        self.stats: dict[str, int] = {
            "peers_seen": 0,
            "peers_gone": 0,
            "ignored_self": 0,
            "ignored_other_mesh": 0,
            "ignored_malformed": 0,
            "ignored_version": 0,
            "ignored_unreachable": 0,
            "resolve_failed": 0,
        }
        self._aiozc: AsyncZeroconf | None = None
        self._browser: AsyncServiceBrowser | None = None
        self._info: ServiceInfo | None = None
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._register_task: asyncio.Task[None] | None = None
        self._known: dict[str, PeerAdvert] = {}  # service name -> last reported advert
        self._ignored: set[tuple[str, str]] = set()  # (service name, reason) already logged
        self._resolve_errors_logged: set[str] = set()  # kinds of resolve error already logged
        self._started = False
        self._registered = False
        self._close_task: asyncio.Task[None] | None = None

    def txt(self) -> dict[str, str]:
        """The TXT properties this node advertises."""
        txt = {
            "mesh": self.mesh,
            "node": self.node_id,
            "inc": self.incarnation,
            "v": str(self.version),
            "rp": str(self.router_port),
            "pp": str(self.pub_port),
        }
        if self.public_key is not None:
            txt["ck"] = self.public_key
        return txt

    @property
    def peers(self) -> dict[str, PeerAdvert]:
        """Currently advertised peers, by node id (latest incarnation seen)."""
        return {advert.node_id: advert for advert in self._known.values()}

    async def start(self) -> None:
        """Open mDNS sockets, start browsing and register in the background.

        Must be awaited inside the running event loop that will own the
        discovery.  Raises RuntimeError when called twice or after close.
        """
        if self._started or self._close_task is not None:
            raise RuntimeError("MdnsDiscovery.start() called twice or after close()")
        self._started = True
        try:
            self._open_zeroconf()
            self._info = ServiceInfo(
                self.SERVICE_TYPE,
                self.service_name,
                port=self.router_port,
                properties=self.txt(),
                server=f"{self.service_name.split('.', 1)[0]}.local.",
                parsed_addresses=list(self.scope.addresses),
            )
            self._register_task = asyncio.ensure_future(self._register(self._info))
        except BaseException:
            await self.close()
            raise

    def _open_zeroconf(self) -> None:
        """A zeroconf instance on our scope's sockets, browsing for our service type."""
        self._aiozc = AsyncZeroconf(interfaces=list(self.scope.addresses))
        zc = self._aiozc.zeroconf
        confine_to_scope(zc, self.scope, self._log)
        _keep_own_questions(zc, self.scope)
        self._browser = AsyncServiceBrowser(zc, [self.SERVICE_TYPE], handlers=[self._on_state_change])

    async def _reopen_zeroconf(self) -> None:
        """zeroconf stopped under us (browsing is dead too): start a new one."""
        if self._browser is not None:
            await self._browser.async_cancel()
            self._browser = None
        if self._aiozc is not None:
            await self._aiozc.async_close()
        self._open_zeroconf()

    async def _register(self, info: ServiceInfo) -> None:
        """Register our service (no probing) and wait for the announcements.

        zeroconf starts its engine in the background; registering before it
        runs raises NotRunningException (seen 3 times in 130 starts under
        load), after which the node would stay unadvertised for life. So wait
        for the engine, and try again a few times before giving up.
        """
        assert self._aiozc is not None
        for attempt in range(1, _REGISTER_ATTEMPTS + 1):
            try:
                await self._aiozc.zeroconf.async_wait_for_start()
                announced = await self._aiozc.async_register_service(info, cooperating_responders=True)
                self._registered = True
                await announced
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # registration failure must not kill browsing
                if attempt == _REGISTER_ATTEMPTS:
                    self._log.error("zmesh discovery: registering %s failed %d times (last: %s: %s); "
                                    "this node is not advertised by mDNS (seeds still work)",
                                    self.service_name, attempt, type(exc).__name__, exc)
                    return
                self._log.debug("zmesh discovery: registering %s failed (%r); trying again", self.service_name, exc)
                await asyncio.sleep(_REGISTER_RETRY * attempt)
                if not self._aiozc.zeroconf.started:
                    await self._reopen_zeroconf()

    async def wait_announced(self) -> bool:
        """Wait until our own service has been registered and announced.

        Returns False if registration failed or was cancelled (closed).
        """
        if self._register_task is None:
            return False
        await asyncio.wait([self._register_task])
        return self._registered and not self._register_task.cancelled()

    async def refresh(self) -> None:
        """Re-announce ourselves and restart browsing (e.g. after a link came back).

        mDNS backs off its queries to once an hour, so after a partition
        heals peers may not notice each other for a long time; this forces an
        immediate round of announcements and queries.
        """
        if self._aiozc is None or self._close_task is not None:
            return
        if self._browser is not None:
            await self._browser.async_cancel()
        self._browser = AsyncServiceBrowser(
            self._aiozc.zeroconf, [self.SERVICE_TYPE], handlers=[self._on_state_change]
        )
        if self._info is not None and self._registered:
            announced = await self._aiozc.async_update_service(self._info)
            await announced

    def _on_state_change(
        self,
        zeroconf: Any,
        service_type: str,
        name: str,
        state_change: ServiceStateChange,
    ) -> None:
        """Browser handler (runs on the loop): schedule resolution or report removal."""
        if self._close_task is not None:
            return
        if name.lower() == self.service_name.lower():
            self._ignore(name, "ignored_self", "our own record", logging.DEBUG)
            return
        previous = self._tasks.pop(name, None)
        if previous is not None:
            previous.cancel()
        if state_change is ServiceStateChange.Removed:
            self._gone(name)
            return
        task = asyncio.ensure_future(self._resolve(service_type, name))
        self._tasks[name] = task
        task.add_done_callback(functools.partial(self._task_done, name))

    def _task_done(self, name: str, task: asyncio.Task[None]) -> None:
        """Forget a finished resolve task (keeping a newer one for the same name);
        what it raised is counted, and logged once per kind of error."""
        if self._tasks.get(name) is task:
            del self._tasks[name]
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            return
        self.stats["resolve_failed"] += 1
        kind = type(exc).__name__
        # zeroconf raises NotRunningException once it is closing: our own close, not news.
        closing = self._close_task is not None or kind == "NotRunningException"
        level = logging.DEBUG if closing or kind in self._resolve_errors_logged else logging.WARNING
        self._resolve_errors_logged.add(kind)
        self._log.log(level, "zmesh discovery: resolving %s failed: %s: %s", printable(name), kind, exc)

    async def _resolve(self, service_type: str, name: str) -> None:
        """Fetch SRV/TXT/A for ``name`` (cache first) and report the peer."""
        assert self._aiozc is not None
        info = AsyncServiceInfo(service_type, name)
        if not await info.async_request(self._aiozc.zeroconf, _RESOLVE_TIMEOUT_MS):
            self.stats["resolve_failed"] += 1
            self._log.debug("zmesh discovery: could not resolve %s", name)
            return
        self._log.debug(
            "zmesh discovery: resolved %s txt=%s addresses=%s",
            name, info.properties, info.parsed_addresses(IPVersion.V4Only),
        )
        try:
            advert = self._parse(info)
        except Malformed as bad:
            self._ignore(name, bad.reason, bad.detail)
            return
        previous = self._known.get(name)
        self._known[name] = advert
        if previous is not None and (previous.node_id, previous.incarnation) == (
            advert.node_id,
            advert.incarnation,
        ):
            return  # same peer, already reported (address or port updates are the mesh's job)
        self.stats["peers_seen"] += 1
        try:
            self._on_peer(advert)
        except Exception:
            self._log.exception("zmesh discovery: on_peer callback failed for %s", advert.node_id)

    def _parse(self, info: AsyncServiceInfo) -> PeerAdvert:
        """Turn a resolved service into a PeerAdvert, or raise Malformed."""
        return parse_advert(info.properties, info.parsed_addresses(IPVersion.V4Only), self.mesh, self.node_id,
                            self.version, self.scope)

    def _ignore(self, name: str, reason: str, detail: str, level: int | None = None) -> None:
        """Count and log an ignored record once per (service name, reason)."""
        if (name, reason) in self._ignored:
            return
        self._ignored.add((name, reason))
        self.stats[reason] = self.stats.get(reason, 0) + 1
        if level is None:
            # Another process's bad advert is its problem, not this node's: counted, and said quietly.
            level = {"ignored_other_mesh": logging.DEBUG, "ignored_malformed": logging.DEBUG,
                     "ignored_unreachable": logging.INFO, "ignored_version": logging.INFO}.get(
                reason, logging.WARNING
            )
        self._log.log(level, "zmesh discovery: %s %s: %s", reason.replace("_", " "), printable(name), printable(detail))

    def _gone(self, name: str) -> None:
        """Handle withdrawal of a service; report the node gone if it was its last."""
        self._ignored = {entry for entry in self._ignored if entry[0] != name}
        advert = self._known.pop(name, None)
        if advert is None:
            return
        if any(other.node_id == advert.node_id for other in self._known.values()):
            return  # a newer incarnation is still advertised
        self.stats["peers_gone"] += 1
        if self._on_peer_gone is not None:
            try:
                self._on_peer_gone(advert.node_id)
            except Exception:
                self._log.exception("zmesh discovery: on_peer_gone callback failed for %s", advert.node_id)

    async def close(self) -> None:
        """Withdraw our service (goodbye packets) and close zeroconf; idempotent."""
        if self._close_task is None:
            self._close_task = asyncio.ensure_future(self._close())
            # Read its outcome even if every caller is cancelled before it ends.
            self._close_task.add_done_callback(self._closed)
        await asyncio.shield(self._close_task)

    def _closed(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self._log.warning("zmesh discovery: closing mDNS failed: %r", task.exception())

    async def _close(self) -> None:
        """Cancel our tasks, stop browsing, unregister and close the sockets."""
        pending = [task for task in (*self._tasks.values(), self._register_task) if task is not None]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        self._tasks.clear()
        if self._browser is not None:
            await self._browser.async_cancel()
            self._browser = None
        if self._aiozc is not None:
            await self._aiozc.async_close()
            self._aiozc = None

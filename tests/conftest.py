"""Shared test set-up.

* Every test runs local-only: ZMESH_INTERFACES=127.0.0.1 (tests that build
  their own network namespaces set their children's environment themselves).
* ``async def`` tests run on a fresh event loop under a deadline.
* Tests fail if they leak threads or ZeroMQ sockets, and if anything, in
  the test's process or in a child writing to its stderr, says that a task's
  or future's exception was never retrieved or a coroutine never awaited.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import os
import re
import threading
from typing import Any, Generator, Iterator

import pytest

os.environ["ZMESH_INTERFACES"] = "127.0.0.1"

pytest_plugins = ["tests.netns", "tests.brokers"]  # the netns_lab fixture; brokers started for the tests

ASYNC_TEST_TIMEOUT = 30.0


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: Any) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    kwargs = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    marker = pyfuncitem.get_closest_marker("timeout")
    timeout = float(marker.args[0]) if marker and marker.args else ASYNC_TEST_TIMEOUT

    async def run() -> None:
        await asyncio.wait_for(pyfuncitem.obj(**kwargs), timeout)

    asyncio.run(run())
    return True


@pytest.fixture(autouse=True)
def _local_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZMESH_INTERFACES", "127.0.0.1")


#: What asyncio and Python say of work that nobody waited for: always a bug.
UNRETRIEVED = re.compile(
    r"(Task|Future) exception was never retrieved|coroutine '?[\w.<>]+'? was never awaited"
)


def pytest_collection_finish(session: pytest.Session) -> None:
    # What exists now (modules, test functions) lives to the end: left out of
    # every collection, the gc.collect() after each test scans only what tests made.
    gc.freeze()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if report.when != "teardown" or report.failed:
        return
    said = "\n".join(text for _, text in report.sections if "stderr" in _ or "log" in _)
    found = UNRETRIEVED.search(said)
    if found:
        report.outcome = "failed"
        report.longrepr = f"the test (or a process it ran) said {found.group(0)!r}: an exception nobody read"


@pytest.fixture(autouse=True)
def _no_leaks() -> Iterator[None]:
    before = {t.ident for t in threading.enumerate()}
    yield
    gc.collect()  # a task or coroutine dropped by this test says so now, in this test
    from zmesh.transport import zmq as zmq_transport

    assert zmq_transport.open_sockets() == 0, "test leaked ZeroMQ sockets"
    leaked = [
        t
        for t in threading.enumerate()
        if t.ident not in before
        and t.is_alive()
        # pyzmq's process-wide helper for zero-copy sends lives as long as the process
        and type(t).__name__ != "GarbageCollectorThread"
    ]
    for thread in leaked:
        thread.join(timeout=2)
    leaked = [t for t in leaked if t.is_alive()]
    assert not leaked, f"test leaked threads: {leaked}"


@pytest.fixture(params=["inproc", "zmq"])
def transport(request: pytest.FixtureRequest) -> str:
    """Run the test once per transport: the semantics must be identical."""
    return str(request.param)

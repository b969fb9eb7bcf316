"""The message mesh's bookkeeping of deliveries a broker holds until they are
settled (zmesh._runtime.held): each is settled once, a redelivery is not
handled twice, and the memory of what was handled is bounded."""

from __future__ import annotations

from typing import Any

import zmesh
from zmesh._runtime import held
from zmesh._runtime.held import HeldDeliveries
from zmesh.transport.memory import MemoryBroker, MemoryTransport


class Recording(MemoryTransport):
    def __init__(self) -> None:
        super().__init__(MemoryBroker())
        self.settled: list[tuple[Any, bool]] = []

    def settle(self, data: Any, handled: bool) -> bool:
        self.settled.append((data, handled))
        return not handled and self.takes_back

    takes_back = True


def message(n: int) -> zmesh.Message:
    return zmesh.Message("notify", "tx", "rx", "job", {"n": n}, qos=1, id=f"m{n}")


def make() -> tuple[HeldDeliveries, Recording, list[str]]:
    transport, counted = Recording(), []
    return HeldDeliveries(transport, counted.append), transport, counted


def test_a_held_delivery_is_acknowledged_once_when_handled() -> None:
    deliveries, transport, _ = make()
    assert deliveries.arrived(message(1), "d1") and len(deliveries) == 1
    assert deliveries.handled(message(1))
    assert not deliveries.handled(message(1))  # settled already: nothing more
    assert transport.settled == [("d1", True)] and len(deliveries) == 0


def test_a_redelivery_while_held_is_left_to_the_first() -> None:
    deliveries, transport, counted = make()
    assert deliveries.arrived(message(1), "d1")
    assert not deliveries.arrived(message(1), "d1-again")  # not delivered to the agent a second time
    assert transport.settled == [] and counted == ["redelivered_while_held"]
    deliveries.handled(message(1))
    assert transport.settled == [("d1-again", True)]  # settled by its latest delivery


def test_a_redelivery_of_a_handled_message_is_acknowledged_not_handled() -> None:
    deliveries, transport, counted = make()
    deliveries.arrived(message(1), "d1")
    deliveries.handled(message(1))
    assert not deliveries.arrived(message(1), "d1-again")
    assert transport.settled == [("d1", True), ("d1-again", True)]
    assert counted == ["redelivered_after_handled"]


def test_a_delivery_that_cannot_run_here_is_given_back() -> None:
    deliveries, transport, counted = make()
    deliveries.arrived(message(1), "d1")
    assert deliveries.give_back(message(1))
    assert not deliveries.give_back(message(1))
    assert transport.settled == [("d1", False)] and counted == ["given_back"]
    assert deliveries.arrived(message(1), "d1-again")  # given back is not handled: it runs when it comes again


def test_a_broker_that_cannot_give_one_back_acknowledges_it_and_the_node_is_told() -> None:
    deliveries, transport, counted = make()
    transport.takes_back = False
    deliveries.arrived(message(1), "d1")
    assert not deliveries.give_back(message(1))  # the node dead-letters it instead
    assert transport.settled == [("d1", False)] and counted == ["not_given_back"] and len(deliveries) == 0


def test_the_memory_of_handled_messages_is_bounded(monkeypatch: Any) -> None:
    monkeypatch.setattr(held, "REMEMBERED", 3)
    deliveries, transport, _ = make()
    for n in range(5):
        deliveries.arrived(message(n), f"d{n}")
        deliveries.handled(message(n))
    assert not deliveries.arrived(message(4), "late4")  # remembered: acknowledged again
    assert deliveries.arrived(message(0), "late0")  # forgotten (the oldest): delivered again

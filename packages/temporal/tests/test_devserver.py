"""The dev server's ports: found free, not reserved, so one may be taken before the server binds it."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from agent_saga_temporal import devserver
from agent_saga_temporal.devserver import DevServer, DevServerError


@pytest.fixture
def taken() -> Iterator[int]:
    """A port another process listens on: what a parallel test's server does to a port found free."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield int(held.getsockname()[1])


@pytest.mark.parametrize("which", [0, 1, 2])  # the frontend, HTTP and metrics ports, in the order chosen
def test_a_port_it_chose_that_is_taken_when_the_server_binds_is_chosen_again(
    taken: int, which: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    real, calls = devserver.free_port, [0]

    def free_port() -> int:  # the which-th port handed out was found free, then taken by someone else
        calls[0] += 1
        return taken if calls[0] == which + 1 else real()

    monkeypatch.setattr(devserver, "free_port", free_port)
    with DevServer() as server:
        assert server.port != taken and server.process is not None and server.process.poll() is None
    assert calls[0] >= 6  # a second set of ports


def test_a_taken_port_the_caller_gave_is_refused_at_once_naming_it(taken: int) -> None:
    with pytest.raises(DevServerError, match=rf"127\.0\.0\.1:{taken}: bind: address already in use"):
        DevServer(port=taken).start()

"""The address `nmt serve` listens on, bound before anything slow starts (no PyTorch here),
so that a busy port or a wrong host is one line at once; and listening sockets that stop
a round of accepting at its first failure for want of file descriptors."""

from __future__ import annotations

import asyncio
import errno
import socket

from transformer_nmt.errors import UserError

OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
"""The errors asyncio gives up accepting on for a second, then tries again."""


class ListeningSocket(socket.socket):
    """A listening socket whose accept(), once it has failed for want of file descriptors
    or memory, answers "nothing waiting" until the event loop's current round of accepting
    is over. On such a failure asyncio stops listening for a second, but first goes on
    through its round, up to the listening backlog's length of accept() calls (uvicorn's
    2048), each failing, reported and setting a timer of its own: thousands of futile
    calls a second, a good part of a CPU, for as long as descriptors lack. Ended at the
    first failure, the round costs one call a second."""

    _resting = False
    """Whether accept() failed for want of resources in the round now running."""

    def accept(self):
        if self._resting:
            raise BlockingIOError(errno.EAGAIN, "accepting rests until the next round")
        try:
            return super().accept()
        except OSError as error:
            if error.errno in OUT_OF_RESOURCES:
                self._resting = True
                # Runs once the round's callback has returned, long before asyncio's
                # retry a second later.
                asyncio.get_running_loop().call_soon(self._wake)
            raise

    def _wake(self) -> None:
        self._resting = False


def listening_sockets(host: str, port: int) -> list[socket.socket]:
    """TCP sockets bound to `port` on every address of `host` (all interfaces for ""), as
    asyncio would bind them, not yet listening; a UserError naming the address and what to
    do when `host` has no address or one cannot be bound."""
    where = url_address(host, port)
    try:
        found = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise UserError(f"cannot listen on {where}: cannot resolve host {host!r} "
                        f"({error.strerror}); give --host an address or name of this "
                        "machine, such as 127.0.0.1 (this machine only) or 0.0.0.0 (every "
                        "interface)") from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, protocol, _, address in dict.fromkeys(found):  # once each
            sockets.append(ListeningSocket(family, kind, protocol))
            # A restarted server gets its port back at once, though the connections of the
            # one before still linger in TIME_WAIT.
            sockets[-1].setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # so that :: and 0.0.0.0 are two binds, not one
                sockets[-1].setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sockets[-1].bind(address)
    except OSError as error:
        for sock in sockets:
            sock.close()
        raise UserError(f"cannot listen on {where}: {_bind_failure(error)}") from None
    return sockets


def _bind_failure(error: OSError) -> str:
    """Why a socket could not be bound, and what to do, in words."""
    if error.errno == errno.EADDRINUSE:
        return ("address already in use (another server is listening there); choose "
                "another --port or stop the other server")
    if error.errno == errno.EADDRNOTAVAIL:
        return ("this machine has no such address; choose a --host of this machine, such "
                "as 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)")
    if error.errno == errno.EACCES:
        return ("permission denied (ports below 1024 need privileges); choose a --port of "
                "1024 or more")
    return f"{error.strerror or error}; check --host and --port"


def url_address(host: str, port: int) -> str:
    """host:port as a URL writes it, an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

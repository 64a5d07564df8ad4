"""A TCP gateway from one host's loopback to addresses on a Docker network, for the admin APIs of
a Swarm stack's brokers.

The admin API changes brokers, so a stack never publishes it: it stays on the stack's overlay
network, the cluster's own. A tidelog command on a manager node reaches it through a container
of its own attached to that network (``tidelog.cluster.swarm``), whose ports Docker publishes on
127.0.0.1 alone, running:

    python -m tidelog.cluster.gateway PORT=HOST:PORT [PORT=HOST:PORT ...] [--idle-exit SECONDS]

Each PORT is listened on and each connection to it forwarded to HOST:PORT, the name resolved
anew for each connection (a replaced task's address changes under its service's name). A gateway
with no connection open for ``--idle-exit`` seconds exits (its container is run with ``--rm``):
one whose command was killed before it could remove it does not keep the network in use for ever.
It prints READY once every port is listened on.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import time

DEFAULT_IDLE_EXIT_S = 900.0
READY = "gateway: listening"  # printed once every port is listened on


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(ConnectionError, OSError):
            writer.close()


class Gateway:
    """Forwards each listening port to its target; ``open`` counts the connections under way and
    ``idle_since`` is when the last one ended (or the gateway started)."""

    def __init__(self, routes: dict[int, tuple[str, int]]) -> None:
        self.routes = routes
        self.open = 0
        self.idle_since = time.monotonic()

    async def _forward(
        self,
        target: tuple[str, int],
        client_reader: asyncio.StreamReader,
        client_writer: asyncio.StreamWriter,
    ) -> None:
        self.open += 1
        try:
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(*target), 10)
            except (TimeoutError, OSError):
                client_writer.close()
                return
            await asyncio.gather(_pipe(client_reader, writer), _pipe(reader, client_writer))
        finally:
            self.open -= 1
            self.idle_since = time.monotonic()

    async def serve(self, idle_exit_s: float) -> None:
        servers = [
            await asyncio.start_server(functools.partial(self._forward, target), "0.0.0.0", port)
            for port, target in self.routes.items()
        ]
        print(READY, flush=True)
        try:
            while self.open or time.monotonic() - self.idle_since < idle_exit_s:
                await asyncio.sleep(1)
        finally:
            for server in servers:
                server.close()


def parse_route(text: str) -> tuple[int, tuple[str, int]]:
    """``PORT=HOST:PORT`` as (listening port, (host, port))."""
    try:
        listen, target = text.split("=", 1)
        host, port = target.rsplit(":", 1)
        return int(listen), (host, int(port))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected PORT=HOST:PORT") from None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tidelog.cluster.gateway",
        description="Forward local ports to HOST:PORT addresses (a Swarm stack's admin APIs).",
    )
    parser.add_argument("routes", nargs="+", type=parse_route, metavar="PORT=HOST:PORT")
    parser.add_argument(
        "--idle-exit",
        type=float,
        default=DEFAULT_IDLE_EXIT_S,
        help="exit after this many seconds without an open connection",
    )
    args = parser.parse_args(argv)
    asyncio.run(Gateway(dict(args.routes)).serve(args.idle_exit))


if __name__ == "__main__":
    main()

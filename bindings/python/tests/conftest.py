"""Fixtures: a real node and a real feed, started from the `tickwire` binary
(TICKWIRE_BIN, default target/debug/tickwire of this repository) on loopback ports the
system picks."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import socket
import subprocess
import threading
import time
from typing import Any, AsyncIterator, Iterator, List, Optional, Tuple

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
START_TIMEOUT = 30.0


def tickwire_bin() -> str:
    path = os.environ.get("TICKWIRE_BIN") or str(REPO / "target" / "debug" / "tickwire")
    if not os.path.exists(path):
        raise RuntimeError(f"no tickwire binary at {path}: build it (cargo build) or set TICKWIRE_BIN")
    return path


class Proc:
    """A tickwire process whose log lines are collected as they come."""

    def __init__(self, args: List[str]) -> None:
        self.args = args
        self.proc = subprocess.Popen(
            [tickwire_bin(), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "TICKWIRE_LOG": "info"},
        )
        self.lines: List[str] = []
        self._ended = False
        self._new_line = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._new_line:
                self.lines.append(line.rstrip("\n"))
                self._new_line.notify_all()
        with self._new_line:
            self._ended = True
            self._new_line.notify_all()

    def wait_for_line(self, needle: str, timeout: float = START_TIMEOUT) -> str:
        deadline = time.monotonic() + timeout
        with self._new_line:
            while True:
                for line in self.lines:
                    if needle in line:
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or self._ended:
                    raise AssertionError(
                        f"`tickwire {' '.join(self.args)}` logged no {needle!r}:\n" + "\n".join(self.lines)
                    )
                self._new_line.wait(min(left, 0.5))

    def listening_address(self) -> str:
        """A node's address, from the line it logs once it listens."""
        return self.wait_for_line("listening on ").split("listening on ")[1].split()[0]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def node() -> Iterator[str]:
    """A node on a loopback port; yields its address."""
    proc = Proc(["node", "--listen", "127.0.0.1:0"])
    try:
        yield proc.listening_address()
    finally:
        proc.stop()


@pytest.fixture
def feed(node: str) -> Iterator[Proc]:
    """The demo feed: service FEED, items SYM0..SYM9, 200 updates/s in all."""
    proc = Proc(["publish", "--node", node, "--items", "10", "--rate", "200"])
    try:
        proc.wait_for_line("published 10 images")
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def posts_node() -> Iterator[str]:
    """A node that takes posts for FEED, and a feed there (items SYM0..SYM2, no updates
    of its own) that accepts them; yields the node's address."""
    node = Proc(["node", "--listen", "127.0.0.1:0", "--posts", "FEED"])
    try:
        addr = node.listening_address()
        feed = Proc(["publish", "--node", addr, "--items", "3", "--rate", "0", "--accept-posts"])
        try:
            feed.wait_for_line("published 3 images")
            yield addr
        finally:
            feed.stop()
    finally:
        node.stop()


async def events_while_ticking(events: AsyncIterator[Any], count: int, pause: float) -> Tuple[List[Any], int]:
    """The next `count` events of an async iterator, and how many turns another task of
    the event loop had meanwhile (sleeping `pause` s each): none means the iteration
    held the loop."""
    ticks = 0
    stop = asyncio.Event()

    async def ticker():
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(pause)

    task = asyncio.create_task(ticker())
    got = []
    async for event in events:
        got.append(event)
        if len(got) == count:
            break
    stop.set()
    await task
    return got, ticks


def wait_until(what: str, check, timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.02)


def first(sub, kind: str, item: Optional[str] = None, timeout: float = START_TIMEOUT):
    """The next event of this type (and item), skipping others."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no {kind} of {item or 'any item'} within {timeout} s")
        event = sub.next(timeout=left)
        if event is not None and event.type == kind and (item is None or event.item == item):
            return event


@contextlib.contextmanager
def silent_address(addr: str) -> Iterator[None]:
    """The address taken by a listener that never accepts, its queue full: the kernel
    drops further connection attempts, so a TCP connect there blocks for its whole
    connect_timeout."""
    host, port = addr.rsplit(":", 1)
    silent = socket.socket()
    fillers = []
    try:
        silent.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        silent.bind((host, int(port)))
        silent.listen(0)
        for _ in range(3):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex((host, int(port)))
            fillers.append(filler)
        yield
    finally:
        for filler in fillers:
            filler.close()
        silent.close()

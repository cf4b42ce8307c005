"""tickwire.aio against real nodes: connect, snapshot, post and iteration awaited with
the event loop watching the socket (no executor thread waits once connected)."""

from __future__ import annotations

import asyncio
import socket

import pytest

import tickwire
import tickwire.aio
from conftest import Proc, events_while_ticking


class CountingExecutor:
    """Counts what the loop runs in its executor (a waiting subscriber would)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.calls = 0
        original = loop.run_in_executor

        def counted(*args, **kwargs):
            self.calls += 1
            return original(*args, **kwargs)

        loop.run_in_executor = counted  # type: ignore[method-assign]


def test_connect_snapshot_and_iterate_without_a_waiting_thread(node, feed):
    async def main():
        s = await tickwire.aio.connect(node)
        executor = CountingExecutor(asyncio.get_running_loop())
        images = await s.snapshot("FEED", ["SYM1", "SYM2"])
        s.subscribe("FEED", ["SYM3"])
        events, ticks = await events_while_ticking(s, 20, 0.001)
        s.disconnect()
        return images, events, ticks, executor.calls

    images, events, ticks, executor_calls = asyncio.run(asyncio.wait_for(main(), 60))
    for event in events:
        assert event.item == "SYM3", event
    got = [event.type for event in events]
    assert set(images) == {"SYM1", "SYM2"}
    assert "BID" in images["SYM1"] and "ASK" in images["SYM2"], images
    assert got[0] == "refresh" and set(got[1:]) == {"update"}, got
    assert ticks > 0, "the event loop ran while the subscriber waited"
    assert executor_calls == 0, "a connected subscriber waits on its socket, not in threads"


def test_a_view_changed_in_place_brings_no_new_image(node, feed):
    async def main():
        s = await tickwire.aio.connect(node)
        s.subscribe("FEED", ["SYM4"], view=["BID", "ASK"])
        events, _ = await events_while_ticking(s, 3, 0.001)
        s.change_view("FEED", ["SYM4"], view=["BID"])
        later, _ = await events_while_ticking(s, 12, 0.001)
        s.disconnect()
        return events, later

    events, later = asyncio.run(asyncio.wait_for(main(), 60))
    assert events[0].type == "refresh"
    # Updates the node sent before it took the change may carry ASK; the last ones
    # carry the bid alone, and no image comes.
    assert all(e.type == "update" for e in later), [e.type for e in later]
    assert all(set(e.fields) <= {"BID"} for e in later[-4:]), [e.fields for e in later[-4:]]


def test_a_snapshot_names_the_items_the_node_could_not_give(node, feed):
    async def main():
        s = await tickwire.aio.connect(node)
        try:
            await s.snapshot("FEED", ["SYM1", "NO.SUCH"], timeout=20)
        finally:
            s.disconnect()

    with pytest.raises(tickwire.TickwireError, match="NO.SUCH"):
        asyncio.run(main())


def test_a_post_is_answered_and_named(posts_node):
    async def main():
        s = await tickwire.aio.connect(posts_node)
        accepted = await s.post("FEED", "SYM1", {"BID": 101.25, "ASK": 101.30})
        refused = await s.post("FEED", "SYM1", {"TRDPRC_1": 5.0})
        sent = await s.post("FEED", "SYM2", {"BID": 1.0, "ASK": 2.0}, ack=False)
        s.disconnect()
        return accepted, refused, sent

    accepted, refused, sent = asyncio.run(asyncio.wait_for(main(), 60))
    assert accepted.type == "ack" and accepted.accepted, accepted
    assert (accepted.service, accepted.item) == ("FEED", "SYM1"), accepted
    assert refused.accepted is False and refused.nak and refused.text, refused
    assert sent is None


def test_a_lost_node_turns_the_streams_suspect_and_reconnecting_never_holds_the_loop():
    node = Proc(["node", "--listen", "127.0.0.1:0"])
    addr = node.listening_address()
    feed = Proc(["publish", "--node", addr, "--items", "3", "--rate", "50"])
    feed.wait_for_line("published 3 images")
    host, port = addr.rsplit(":", 1)
    silent = socket.socket()
    fillers = []

    async def main():
        s = await tickwire.aio.connect(addr, connect_timeout=3.0)
        s.subscribe("FEED", ["SYM1"])
        async for event in s:
            if event.type == "refresh":
                break
        node.stop()
        feed.stop()
        suspect = None
        async for event in s:
            if event.type == "status" and event.data_state == "suspect":
                suspect = event
                break
        # The node's port now has a listener that never accepts, its queue full: the
        # kernel drops further connection attempts, so each reconnection's TCP connect
        # blocks for its connect_timeout (3 s). The loop must not: its longest pause
        # stays far below that (a margin for a busy machine).
        silent.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        silent.bind((host, int(port)))
        silent.listen(0)
        for _ in range(3):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex((host, int(port)))
            fillers.append(filler)
        events = asyncio.create_task(s.next())
        loop = asyncio.get_running_loop()
        last = start = loop.time()
        longest = 0.0
        while loop.time() - start < 4.0:
            await asyncio.sleep(0.01)
            now = loop.time()
            longest = max(longest, now - last)
            last = now
        events.cancel()
        connected = s.connected
        s.disconnect()
        return suspect, longest, connected

    try:
        suspect, longest, connected = asyncio.run(asyncio.wait_for(main(), 60))
    finally:
        for f in fillers:
            f.close()
        silent.close()
        feed.stop()
        node.stop()
    assert suspect is not None and suspect.item == "SYM1", suspect
    assert longest < 1.5, f"the event loop was held {longest:.2f} s while the library reconnected"
    assert not connected


def test_an_application_that_takes_no_events_leaves_them_in_the_socket(node, feed, monkeypatch):
    """Past `_MAX_WAITING` events waiting for the application, the socket is not read
    (the node sees a slow consumer) until the application has taken half; then events
    flow again. (They once piled up in the process without end.)"""
    monkeypatch.setattr(tickwire.aio, "_MAX_WAITING", 40)

    async def main():
        s = await tickwire.aio.connect(node)
        s.subscribe("FEED", [f"SYM{i}" for i in range(10)])
        # 200 updates a second arrive; nobody takes them for 3 s.
        await asyncio.sleep(3)
        held = len(s._events)
        first = await s.next_batch()
        later = await asyncio.wait_for(s.next_batch(), 10)
        s.disconnect()
        return held, first, later

    held, first, later = asyncio.run(asyncio.wait_for(main(), 60))
    # One read's events beyond the bound at most (a read takes what the socket has).
    assert 40 <= held < 200, held
    assert later, "events flow again once taken"


def test_a_paused_subscriber_still_gets_its_snapshots_and_post_answers(monkeypatch):
    """Past `_MAX_WAITING` events the socket is left unread, but a snapshot or a post's
    answer awaited meanwhile is read all the same: only reading can bring it."""
    monkeypatch.setattr(tickwire.aio, "_MAX_WAITING", 40)
    node_proc = Proc(["node", "--listen", "127.0.0.1:0", "--posts", "FEED"])
    node = node_proc.listening_address()
    feed = Proc(["publish", "--node", node, "--items", "3", "--rate", "200", "--accept-posts"])

    async def main():
        s = await tickwire.aio.connect(node)
        s.subscribe("FEED", [f"SYM{i}" for i in range(3)])
        while len(s._events) < 40:  # paused once this many wait
            await asyncio.sleep(0.05)
        image = await s.snapshot("FEED", ["SYM1"], timeout=10)
        ack = await s.post("FEED", "SYM1", {"BID": 101.25}, timeout=10)
        s.disconnect()
        return image, ack

    try:
        feed.wait_for_line("published 3 images")
        image, ack = asyncio.run(asyncio.wait_for(main(), 60))
    finally:
        feed.stop()
        node_proc.stop()
    assert image["SYM1"], image
    assert ack is not None and ack.accepted, ack

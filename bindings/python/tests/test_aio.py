"""tickwire.aio against real nodes: connect, snapshot, post and iteration awaited with
the event loop watching the socket (no executor thread waits once connected)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import signal
import socket
import time
import traceback
import weakref
from typing import Iterator

import pytest

import tickwire
import tickwire.aio
from conftest import Proc, events_while_ticking, silent_address


class CountingExecutor:
    """Counts what the loop runs in its executor (a waiting subscriber would)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.calls = 0
        original = loop.run_in_executor

        def counted(*args, **kwargs):
            self.calls += 1
            return original(*args, **kwargs)

        loop.run_in_executor = counted  # type: ignore[method-assign]



async def longest_pause(seconds: float) -> float:
    """The longest the running loop went without running this task, over `seconds`."""
    loop = asyncio.get_running_loop()
    last = start = loop.time()
    longest = 0.0
    while loop.time() - start < seconds:
        await asyncio.sleep(0.01)
        now = loop.time()
        longest = max(longest, now - last)
        last = now
    return longest


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


def test_a_post_with_a_timeout_it_cannot_take_is_refused_before_it_is_sent(posts_node):
    """As the blocking Subscriber's: a bad timeout is a ValueError, and the post is not
    sent (its answer would then come as an event nobody awaits)."""

    async def main():
        s = await tickwire.aio.connect(posts_node)
        for timeout in (-1.0, math.nan, math.inf):
            with pytest.raises(ValueError, match="timeout"):
                await s.post("FEED", "SYM1", {"BID": 1.0}, timeout=timeout)
        accepted = await s.post("FEED", "SYM1", {"BID": 2.0})
        # Any answer to a post sent above would have come before this one's.
        stray = list(s._events)
        s.disconnect()
        return accepted, stray

    accepted, stray = asyncio.run(asyncio.wait_for(main(), 60))
    assert accepted.accepted, accepted
    assert [e for e in stray if e.type == "ack"] == [], stray


async def subscribed_then_lost(addr: str, node: Proc, feed: Proc, connect_timeout: float):
    """A subscriber of FEED's SYM1, with its image, whose node and feed then stop; with
    the suspect status it saw."""
    s = await tickwire.aio.connect(addr, connect_timeout=connect_timeout)
    s.subscribe("FEED", ["SYM1"])
    async for event in s:
        if event.type == "refresh":
            break
    node.stop()
    feed.stop()
    async for event in s:
        if event.type == "status" and event.data_state == "suspect":
            return s, event
    return s, None


@contextlib.contextmanager
def node_feed_and_cleanup():
    """A node and a feed of 3 items that has published its images, with the node's
    address and an exit stack for what a test adds; all of it closed, then the feed
    and the node stopped, when the test is done."""
    node = Proc(["node", "--listen", "127.0.0.1:0"])
    addr = node.listening_address()
    feed = Proc(["publish", "--node", addr, "--items", "3", "--rate", "50"])
    feed.wait_for_line("published 3 images")
    stack = contextlib.ExitStack()
    try:
        yield node, addr, feed, stack
    finally:
        stack.close()
        feed.stop()
        node.stop()


def test_a_lost_node_turns_the_streams_suspect_and_reconnecting_never_holds_the_loop():
    with node_feed_and_cleanup() as (node, addr, feed, stack):

        async def main():
            s, suspect = await subscribed_then_lost(addr, node, feed, 3.0)
            # The node's port now has a listener that never accepts, its queue full: the
            # kernel drops further connection attempts, so each reconnection's TCP connect
            # blocks for its connect_timeout (3 s). The loop must not: its longest pause
            # stays far below that (a margin for a busy machine).
            stack.enter_context(silent_address(addr))
            events = asyncio.create_task(s.next())
            longest = await longest_pause(4.0)
            events.cancel()
            connected = s.connected
            s.disconnect()
            return suspect, longest, connected

        suspect, longest, connected = asyncio.run(asyncio.wait_for(main(), 60))
    assert suspect is not None and suspect.item == "SYM1", suspect
    assert longest < 1.5, f"the event loop was held {longest:.2f} s while the library reconnected"
    assert not connected


def test_calls_on_the_loop_do_not_wait_for_a_reconnect_in_the_executor():
    """While the executor reconnects, its TCP connect blocked for the whole
    connect_timeout (10 s) by a listener that never accepts, the subscriber's calls on
    the loop go on: they once waited for the library's lock, held through the connect."""
    with node_feed_and_cleanup() as (node, addr, feed, stack):

        async def main():
            loop = asyncio.get_running_loop()
            s, _ = await subscribed_then_lost(addr, node, feed, 10.0)
            stack.enter_context(silent_address(addr))
            start = loop.time()
            while not s._reconnecting:
                assert loop.time() - start < 30, "the subscriber never began to reconnect"
                await asyncio.sleep(0.01)
            # Calls on the loop for 2 s of the reconnect: none waits for it.
            longest, calls, sids = 0.0, 0, []
            start = loop.time()
            while loop.time() - start < 2.0:
                t0 = time.monotonic()
                sids = s.subscribe("FEED", ["SYM2"])
                connected = s.connected
                longest = max(longest, time.monotonic() - t0)
                calls += 1
                assert not connected
                await asyncio.sleep(0.05)
            reconnecting = s._reconnecting
            s.disconnect()
            return longest, calls, sids, reconnecting

        longest, calls, sids, reconnecting = asyncio.run(asyncio.wait_for(main(), 60))
    assert longest < 5.0, f"a call on the loop waited {longest:.2f} s for the reconnect"
    assert reconnecting, "the reconnect ended before the calls were made"
    assert calls > 1 and len(sids) == 1, (calls, sids)


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


def test_every_task_awaiting_the_subscriber_is_woken_and_failed_when_it_is_closed(node, feed):
    """Two tasks awaiting one subscriber: both get events, both are failed by
    disconnect() (the first one's wait was once replaced by the second's, for good)."""

    async def main():
        s = await tickwire.aio.connect(node)
        s.subscribe("FEED", ["SYM1"])
        woken = await asyncio.wait_for(asyncio.gather(s.next(), s.next()), 20)
        idle = await tickwire.aio.connect(node)  # no stream: nothing comes
        waiting = [asyncio.create_task(idle.next()) for _ in range(2)]
        await asyncio.sleep(0.1)
        idle.disconnect()
        failed = await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), 5)
        s.disconnect()
        return woken, failed

    woken, failed = asyncio.run(asyncio.wait_for(main(), 60))
    assert all(e.item == "SYM1" for e in woken), woken
    assert all(isinstance(e, ConnectionError) for e in failed), failed


def _slow_service(node: str) -> Proc:
    """A publisher of SLOW that answers each request (stop it to leave one unanswered)."""
    feed = Proc(["publish", "--node", node, "--service", "SLOW", "--items", "3", "--rate", "0", "--interactive"])
    feed.wait_for_line("items available on request")
    # The feed's line is no sign the node has read its directory yet.
    with tickwire.Subscriber(node) as s:
        s.wait_for_service("SLOW", timeout=10)
    return feed


def test_disconnect_fails_the_snapshot_awaited(node):
    feed = _slow_service(node)

    async def main():
        s = await tickwire.aio.connect(node)
        await s.snapshot("SLOW", ["SYM0"], timeout=20)
        feed.proc.send_signal(signal.SIGSTOP)  # the next snapshot is not answered
        task = asyncio.create_task(s.snapshot("SLOW", ["SYM1"], timeout=30))
        await asyncio.sleep(0.3)
        s.disconnect()
        try:
            await asyncio.wait_for(task, 5)
        except Exception as e:  # noqa: BLE001 - what it raised is the result
            return e

    try:
        raised = asyncio.run(asyncio.wait_for(main(), 60))
    finally:
        feed.proc.send_signal(signal.SIGCONT)
        feed.stop()
    assert isinstance(raised, ConnectionError) and "closed" in str(raised), repr(raised)


def test_a_snapshot_cancelled_leaves_no_stream_behind(node):
    """A snapshot given up from outside (a cancellation) closes its streams as its own
    timeout does: its late image is no stray event."""
    feed = _slow_service(node)

    async def main():
        s = await tickwire.aio.connect(node)
        await s.snapshot("SLOW", ["SYM0"], timeout=20)
        feed.proc.send_signal(signal.SIGSTOP)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(s.snapshot("SLOW", ["SYM1"], timeout=30), 0.5)
        with pytest.raises(ValueError):
            await s.snapshot("SLOW", ["SYM2"], timeout=math.inf)
        feed.proc.send_signal(signal.SIGCONT)
        # Once the publisher answers again, a later snapshot comes, and no stray image.
        assert (await s.snapshot("SLOW", ["SYM0"], timeout=20))["SYM0"]
        try:
            stray = await asyncio.wait_for(s.next(), 1.0)
        except asyncio.TimeoutError:
            stray = None
        s.disconnect()
        return stray

    try:
        stray = asyncio.run(asyncio.wait_for(main(), 60))
    finally:
        feed.proc.send_signal(signal.SIGCONT)
        feed.stop()
    assert stray is None, stray


def test_a_write_that_finds_the_connection_lost_while_paused_loses_no_event(monkeypatch):
    """A call that writes can find the connection lost (the library then closes its
    socket): reading resumes on the library's socket, not on the closed one, and the
    events taken are all there."""
    monkeypatch.setattr(tickwire.aio, "_MAX_WAITING", 40)
    node = Proc(["node", "--listen", "127.0.0.1:0"])
    addr = node.listening_address()
    feed = Proc(["publish", "--node", addr, "--items", "10", "--rate", "200"])

    async def main():
        s = await tickwire.aio.connect(addr)
        s.subscribe("FEED", [f"SYM{i}" for i in range(10)])
        while not s._paused:
            await asyncio.sleep(0.05)
        node.proc.kill()
        node.proc.wait()
        # Writes until one finds the socket dead.
        for i in range(20):
            s.subscribe("FEED", [f"X{i}"])
            if s._native.fileno() is None:
                break
            time.sleep(0.1)
        batch = await asyncio.wait_for(s.next_batch(), 10)
        s.disconnect()
        return batch

    try:
        feed.wait_for_line("published 10 images")
        batch = asyncio.run(asyncio.wait_for(main(), 60))
    finally:
        feed.stop()
        node.stop()
    assert len(batch) >= 40, len(batch)


def test_a_post_that_finds_the_connection_lost_raises_and_the_loop_is_not_held():
    """A post without ack whose write finds the connection lost raises (it was not
    sent); the reconnections after it run in the executor, not on the loop, though
    no read saw the loss."""
    node = Proc(["node", "--listen", "127.0.0.1:0"])
    addr = node.listening_address()
    stack = contextlib.ExitStack()

    async def main():
        s = await tickwire.aio.connect(addr, connect_timeout=3.0)
        await asyncio.sleep(0.2)
        node.proc.kill()
        node.proc.wait()
        # A listener that never accepts, its queue full: each reconnection's TCP
        # connect blocks for connect_timeout (3 s).
        stack.enter_context(silent_address(addr))
        raised = None
        for _ in range(20):  # the first write after the loss may still be taken
            try:
                await s.post("FEED", "X", {"BID": 1.0}, ack=False)
            except ConnectionError as e:
                raised = e
                break
            time.sleep(0.1)
        longest = await longest_pause(4.0)
        s.disconnect()
        return raised, longest

    try:
        raised, longest = asyncio.run(asyncio.wait_for(main(), 60))
    finally:
        stack.close()
        node.stop()
    assert raised is not None, "a post lost with its connection raises"
    assert longest < 1.5, f"the event loop was held {longest:.2f} s while the library reconnected"


def test_without_reconnect_a_lost_connection_ends_the_subscriber_for_good():
    """reconnect=False: the loss is raised, and again by every later call; nothing
    reconnects, even with a node back on the address."""
    node = Proc(["node", "--listen", "127.0.0.1:0"])
    addr = node.listening_address()

    async def main():
        nonlocal node
        s = await tickwire.aio.connect(addr, reconnect=False)
        s.subscribe("FEED", ["SYM1"])
        node.stop()
        node = Proc(["node", "--listen", addr])
        node.listening_address()
        with pytest.raises(ConnectionError) as lost:
            await asyncio.wait_for(s.next(), 20)
        await asyncio.sleep(1.5)  # timer turns in which a reconnection would come
        with pytest.raises(ConnectionError) as again:
            s.subscribe("FEED", ["SYM2"])
        # Raised again and again, it does not gather the frames of every raise.
        depths = []
        for _ in range(3):
            with pytest.raises(ConnectionError) as more:
                s.subscribe("FEED", ["SYM2"])
            depths.append(len(traceback.extract_tb(more.value.__traceback__)))
        assert depths[0] == depths[-1], depths
        state = (s.connected, s._native.reconnects, s._handles.timer)
        s.disconnect()
        return lost.value, again.value, state

    try:
        lost, again, (connected, reconnects, timer) = asyncio.run(asyncio.wait_for(main(), 60))
    finally:
        node.stop()
    assert again is lost, (lost, again)
    assert not connected and reconnects == 0 and timer is None


def test_a_subscriber_dropped_without_disconnect_is_collected(node, feed):
    """The loop's reader and timer do not keep a subscriber dropped without
    disconnect(): it is collected, its connection closed (with a ResourceWarning)."""

    async def main():
        s = await tickwire.aio.connect(node)
        s.subscribe("FEED", ["SYM1"])
        await s.next()
        native, ref = s._native, weakref.ref(s)
        with pytest.warns(ResourceWarning):
            del s
            gc.collect()
        await asyncio.sleep(0.1)
        with pytest.raises(ConnectionError):
            native.fileno()
        return ref()

    assert asyncio.run(asyncio.wait_for(main(), 60)) is None


def test_dropping_a_subscriber_while_it_reconnects_does_not_hold_the_loop():
    """A subscriber collected while its executor is in a reconnect's TCP connect (to an
    address whose accept queue is full) is disconnected without the loop waiting for
    that connect."""
    import warnings

    async def main():
        node = Proc(["node", "--listen", "127.0.0.1:0"])
        addr = node.listening_address()
        s = await tickwire.aio.connect(addr, reconnect=True, connect_timeout=3.0)
        s.subscribe("FEED", ["SYM1"])
        node.stop()
        with silent_address(addr):
            deadline = time.monotonic() + 10
            while not s._reconnecting and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert s._reconnecting
            await asyncio.sleep(0.2)  # the executor is in its connect
            start = time.monotonic()
            del s
            gc.collect()
            return time.monotonic() - start

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        held = asyncio.run(main())
    assert held < 1.5, f"the loop was held {held:.2f} s (the connect takes 3 s)"

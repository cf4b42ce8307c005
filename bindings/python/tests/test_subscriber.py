"""The Python Subscriber against a real node and the demo feed (`tickwire publish`)."""

from __future__ import annotations

import asyncio
import datetime
import socket
import subprocess
import threading
import time

import pytest

import tickwire
from conftest import events_while_ticking, first


def test_streaming_gives_the_image_then_updates_in_order(node, feed):
    s = tickwire.Subscriber(node)
    s.subscribe("FEED", ["SYM1"])
    refresh = first(s, "refresh", "SYM1")
    assert (refresh.service, refresh.item) == ("FEED", "SYM1")
    assert (refresh.stream_state, refresh.data_state) == ("open", "ok")
    assert refresh.complete is True
    assert refresh.fields["DSPLY_NAME"] == "SYM1"
    assert isinstance(refresh.fields["BID"], float) and refresh.fields["ASK"] > refresh.fields["BID"]
    assert isinstance(refresh.fields["BIDSIZE"], int)
    assert isinstance(refresh.fields["TIMACT"], datetime.time)
    seqs = [refresh.seq]
    for _ in range(5):
        update = first(s, "update", "SYM1")
        assert update.update_type in ("quote", "trade")
        assert update.fields, "an update carries the fields that changed"
        seqs.append(update.seq)
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), seqs
    s.close("FEED", ["SYM1"])
    with pytest.raises(KeyError):
        s.close("FEED", ["SYM1"])
    s.disconnect()


def test_iterating_the_subscriber_yields_events(node, feed):
    s = tickwire.Subscriber(node)
    s.subscribe("FEED", "SYM2")
    kinds = [event.type for _, event in zip(range(4), s)]
    assert kinds[0] == "refresh" and kinds[1:] == ["update"] * 3


def test_a_view_carries_only_its_fields(node, feed):
    s = tickwire.Subscriber(node)
    s.view("FEED", ["SYM3"], ["BID", "ASK"])
    refresh = first(s, "refresh", "SYM3")
    assert set(refresh.fields) == {"BID", "ASK"}
    for _ in range(3):
        assert set(first(s, "update", "SYM3").fields) <= {"BID", "ASK"}


def test_a_view_changed_in_place_brings_no_new_image(node, feed):
    s = tickwire.Subscriber(node)
    s.view("FEED", ["SYM3"], ["BID", "ASK"])
    first(s, "refresh", "SYM3")
    s.change_view("FEED", ["SYM3"], view=["BID"])
    # Updates sent before the node took the change may still carry ASK; later ones
    # carry the bid alone, and no image comes.
    seen = []
    while len([e for e in seen if e.type == "update"]) < 12:
        event = s.next(timeout=10)
        assert event is not None, "the feed goes on"
        if event.item == "SYM3":
            seen.append(event)
    assert all(e.type == "update" for e in seen), [e.type for e in seen]
    assert all(set(e.fields) <= {"BID"} for e in seen[-4:]), [e.fields for e in seen[-4:]]
    with pytest.raises(KeyError):
        s.change_view("FEED", ["NOPE"], view=None)


def test_snapshot_gives_every_image_and_names_what_the_node_refused(node, feed):
    s = tickwire.Subscriber(node)
    images = s.snapshot("FEED", ["SYM4", "SYM5", "SYM6"])
    assert sorted(images) == ["SYM4", "SYM5", "SYM6"]
    assert all(image["DSPLY_NAME"] == name for name, image in images.items())
    with pytest.raises(tickwire.TickwireError, match=r"NOPE: .*not found"):
        s.snapshot("FEED", ["SYM4", "NOPE"])
    frame = s.snapshot_frame("FEED", ["SYM7", "SYM8"], fields=["BID", "ASK"])
    assert list(frame.index) == ["SYM7", "SYM8"]
    assert list(frame.columns) == ["BID", "ASK"]
    assert (frame["ASK"] > frame["BID"]).all()


def test_a_snapshot_taken_while_streaming_loses_no_event(node, feed):
    s = tickwire.Subscriber(node)
    s.subscribe("FEED", ["SYM1"])
    s.snapshot("FEED", ["SYM9"])
    # The streamed item's refresh came during the snapshot: it is still delivered first.
    assert first(s, "refresh", "SYM1").item == "SYM1"


def test_asyncio_iteration_lets_the_loop_run(node, feed):
    async def main():
        s = tickwire.Subscriber(node)
        s.subscribe("FEED", ["SYM1"])
        events, ticks = await events_while_ticking(s, 3, 0)
        return [event.type for event in events], ticks

    got, ticks = asyncio.run(main())
    assert got == ["refresh", "update", "update"]
    assert ticks > 0, "the event loop ran while the subscriber waited"


def test_an_async_wait_cancelled_while_reconnecting_loses_no_event(node, feed):
    """`async for` on the blocking Subscriber reads in the loop's executor while there is
    no socket to watch (reconnecting). A wait cancelled meanwhile (a timeout around it)
    must not lose what that read brings: the next wait gets it."""
    s = tickwire.Subscriber(node)
    real = s._native
    release, first_read = threading.Event(), threading.Event()

    class Reconnecting:
        """The native subscriber, as while it reconnects: no socket; its first read
        returns only once released."""

        def fileno(self):
            return None

        def next_events(self, timeout):
            if first_read.is_set():
                return real.next_events(timeout)
            release.wait(30)
            try:
                return real.next_events(timeout)
            finally:
                first_read.set()

    s.subscribe("FEED", ["SYM1"])
    s._native = Reconnecting()

    async def main():
        # The read is under way, held, when the wait times out.
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(s.__anext__(), 0.2)
        release.set()
        await asyncio.get_running_loop().run_in_executor(None, first_read.wait, 30)
        return await asyncio.wait_for(s.__anext__(), 10)

    try:
        event = asyncio.run(main())
    finally:
        release.set()
        s._native = real
        s.disconnect()
    assert (event.type, event.item) == ("refresh", "SYM1"), event


def test_a_wait_releases_the_gil(node, feed):
    # The waiting thread can only get an event if this thread subscribes while it
    # waits: with the GIL held, the wait would end empty-handed after 60 s.
    s = tickwire.Subscriber(node)
    got = []
    waiter = threading.Thread(target=lambda: got.append(s.next(timeout=60)))
    waiter.start()
    s.subscribe("FEED", ["SYM1"])
    waiter.join()
    assert got[0] is not None and got[0].item == "SYM1"


def test_errors_are_exceptions_with_the_reason(node):
    with pytest.raises(ConnectionError, match="cannot connect"):
        tickwire.Subscriber("127.0.0.1:1", connect_timeout=1.0)
    s = tickwire.Subscriber(node)
    with pytest.raises(KeyError, match="NOT_A_FIELD"):
        s.view("FEED", ["SYM1"], ["NOT_A_FIELD"])
    with pytest.raises(ValueError, match="timeout"):
        s.next(timeout=-1)
    with pytest.raises(ValueError, match="connect_timeout must be more than 0"):
        tickwire.Subscriber(node, connect_timeout=0)
    # A wait too long for the clock is a very long one, not a crash (PanicException).
    with pytest.raises(tickwire.TickwireError, match="NOPE"):
        s.snapshot("NOPE", ["X"], timeout=1e300)
    s.disconnect()
    with pytest.raises(ConnectionError, match="disconnected"):
        s.subscribe("FEED", ["SYM1"])


def test_next_batch_returns_what_is_there_and_keeps_order(node, feed):
    s = tickwire.Subscriber(node)
    s.subscribe("FEED", ["SYM1"])
    events = []
    while len(events) < 4:
        events.extend(s.next_batch(timeout=30))
    assert events[0].type == "refresh"
    seqs = [e.seq for e in events]
    assert seqs == sorted(seqs)
    assert s.next_batch(timeout=0) is not None  # a zero wait returns at once


def test_a_refused_login_raises_login_error_with_the_nodes_reason(tmp_path):
    from conftest import Proc, tickwire_bin

    hashed = subprocess.run(
        [tickwire_bin(), "users", "hash"], input="s3cret", capture_output=True, text=True, check=True
    ).stdout.strip()
    users = tmp_path / "users.toml"
    users.write_text(f'[users.alice]\n{hashed}\nsubscribe = ["FEED"]\n')
    users.chmod(0o600)
    config = tmp_path / "node.toml"
    config.write_text(f'[security]\nusers_file = "{users}"\n')
    proc = Proc(["node", "--listen", "127.0.0.1:0", "--config", str(config)])
    try:
        addr = proc.listening_address()
        with pytest.raises(tickwire.LoginError, match="wrong secret"):
            tickwire.Subscriber(addr, user="alice", token="not-it")
        # The right secret logs in (the node's reason above was about the secret).
        s = tickwire.Subscriber(addr, user="alice", token="s3cret")
        assert s.connected
        s.disconnect()
    finally:
        proc.stop()


def test_a_list_of_nodes_skips_one_that_is_down(node, feed):
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        down = f"127.0.0.1:{unused.getsockname()[1]}"
    # Nothing listens at `down` now; the node after it in the list answers.
    s = tickwire.Subscriber(f"{down},tcp://{node}")
    assert set(s.snapshot("FEED", ["SYM1"])) == {"SYM1"}
    s.disconnect()
    with pytest.raises(ConnectionError, match="ws:// is not this client's protocol"):
        tickwire.Subscriber("ws://127.0.0.1:15000/WebSocket")


def _raw_publisher(node: str, service: str, item: str, fields: bytes) -> socket.socket:
    """A publisher speaking the node's protocol by hand (docs/PROTOCOL.md): logged in,
    `service` up, `item`'s image with `fields` (an encoded field list's entries, two)."""
    import struct

    def s16(s: str) -> bytes:
        b = s.encode()
        return struct.pack(">H", len(b)) + b

    def msg(kind: int, body: bytes) -> bytes:
        return struct.pack(">BH", kind, len(body)) + body

    def frame(payload: bytes) -> bytes:
        return struct.pack(">I", len(payload)) + payload

    host, port = node.rsplit(":", 1)
    c = socket.create_connection((host, int(port)), timeout=10)
    login = msg(1, struct.pack(">HHB", 1, 1, 2) + s16("raw") + s16("raw") + s16("") + b"\0")
    c.sendall(frame(login))
    length = struct.unpack(">I", c.recv(4, socket.MSG_WAITALL))[0]
    c.recv(length, socket.MSG_WAITALL)  # the Welcome
    directory = msg(3, struct.pack(">H", 1) + s16(service) + struct.pack(">BBI", 1, 0, 0))
    state = struct.pack(">BBH", 1, 1, 0) + s16("")
    image = msg(
        5,
        struct.pack(">IIB", 1, 1, 0x05) + state + s16(service) + s16(item)
        + struct.pack(">H", 2) + fields,
    )
    c.sendall(frame(directory) + frame(image))
    return c


def test_a_date_python_cannot_hold_is_none_and_costs_nothing_else(node):
    """Year 0 is a date on the wire (0 to 65535) but not in Python (1 to 9999): it comes
    as None, as a blank would, and the rest of the image and of the batch as they are.
    (It once raised ValueError and lost the whole batch.)"""
    import struct

    bid = struct.pack(">hBb", 22, 3, -2) + bytes([200, 1])  # 1.00: 100 as a zigzag varint
    year0 = struct.pack(">hB", 16, 4) + struct.pack(">HBB", 0, 1, 1)
    pub = _raw_publisher(node, "RAW", "Z", bid + year0)
    try:
        sub = tickwire.Subscriber(node)
        sub.subscribe("RAW", ["Z"])
        refresh = first(sub, "refresh")
        assert refresh.fields["BID"] == 1.0, refresh.fields
        assert "TRADE_DATE" in refresh.fields and refresh.fields["TRADE_DATE"] is None, refresh.fields
        sub.disconnect()
    finally:
        pub.close()


def test_a_snapshot_given_up_on_leaves_no_stream_behind(node):
    """A snapshot that times out closes its streams: left open, each brought a stray
    image when its answer came late, and was asked for again after every reconnection."""
    import signal

    from conftest import Proc

    feed = Proc(["publish", "--node", node, "--service", "SLOW", "--items", "3", "--rate", "0", "--interactive"])
    s = tickwire.Subscriber(node)
    try:
        feed.wait_for_line("items available on request")
        # The feed's line is no sign the node has read its directory yet.
        s.wait_for_service("SLOW", timeout=10)
        assert s.snapshot("SLOW", ["SYM0"], timeout=10)["SYM0"]
        # The publisher stops answering: the next snapshot times out...
        feed.proc.send_signal(signal.SIGSTOP)
        with pytest.raises(TimeoutError):
            s.snapshot("SLOW", ["SYM1"], timeout=0.5)
        # ...and its answer, when the publisher resumes, reaches no stream.
        feed.proc.send_signal(signal.SIGCONT)
        assert s.snapshot("SLOW", ["SYM2"], timeout=10)["SYM2"]
        stray = [e for e in s.next_batch(1.0) if e.type == "refresh"]
        assert stray == [], stray
    finally:
        feed.proc.send_signal(signal.SIGCONT)
        feed.stop()
        s.disconnect()


def test_a_snapshot_interrupted_leaves_no_stream_behind(node):
    """A snapshot given up by anything but its own timeout (here a signal handler
    raising, as Ctrl-C does) closes its streams too; a timeout it cannot take is refused
    before any stream opens."""
    import math
    import signal

    from conftest import Proc

    class Interrupted(Exception):
        pass

    def interrupt(*_):
        raise Interrupted()

    feed = Proc(["publish", "--node", node, "--service", "SLOW", "--items", "3", "--rate", "0", "--interactive"])
    s = tickwire.Subscriber(node)
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        feed.wait_for_line("items available on request")
        # The feed's line is no sign the node has read its directory yet.
        s.wait_for_service("SLOW", timeout=10)
        assert s.snapshot("SLOW", ["SYM0"], timeout=10)["SYM0"]
        feed.proc.send_signal(signal.SIGSTOP)
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(Interrupted):
            s.snapshot("SLOW", ["SYM1"], timeout=30)
        with pytest.raises(ValueError, match="timeout"):
            s.snapshot("SLOW", ["SYM2"], timeout=math.inf)
        feed.proc.send_signal(signal.SIGCONT)
        assert s.snapshot("SLOW", ["SYM0"], timeout=10)["SYM0"]
        stray = s.next_batch(1.0)
        assert stray == [], stray
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        feed.proc.send_signal(signal.SIGCONT)
        feed.stop()
        s.disconnect()


def test_without_reconnect_a_lost_connection_is_raised_again_by_every_call():
    """reconnect=False: once lost, the subscriber stays lost (a node back on the same
    address is not reconnected to) and every call raises the loss again."""
    from conftest import Proc

    node = Proc(["node", "--listen", "127.0.0.1:0"])
    addr = node.listening_address()
    s = tickwire.Subscriber(addr, reconnect=False)
    try:
        s.subscribe("FEED", ["SYM1"])
        # The node goes, and another comes on its address.
        node.stop()
        node = Proc(["node", "--listen", addr])
        node.listening_address()
        with pytest.raises(ConnectionError) as lost:
            while True:
                s.next(timeout=20)
        for _ in range(3):
            with pytest.raises(ConnectionError) as again:
                s.next(timeout=0.5)
            assert type(again.value) is type(lost.value) and str(again.value) == str(lost.value)
        assert not s.connected and s.reconnects == 0
    finally:
        s.disconnect()
        node.stop()


def test_a_subscriber_that_writes_but_does_not_read_for_a_while_is_not_taken_for_lost(tmp_path):
    """The node's data waiting in the socket shows it alive: a subscriber that only
    wrote for longer than three of the node's heartbeats (100 ms here) reads it before
    judging the node silent."""
    from conftest import Proc

    config = tmp_path / "node.toml"
    config.write_text("[limits]\nheartbeat_ms = 100\n")
    node = Proc(["node", "--listen", "127.0.0.1:0", "--config", str(config)])
    s = tickwire.Subscriber(node.listening_address())
    try:
        # Requests keep the node hearing from it (its answers wait unread) for 1 s.
        for i in range(10):
            s.subscribe("FEED", [f"X{i}"])
            time.sleep(0.1)
        events = s.next_batch(0.5)
        lost = [e for e in events if "lost" in (e.text or "")]
        assert lost == [] and s.reconnects == 0, lost
    finally:
        s.disconnect()
        node.stop()


def test_keys_and_views_name_fields_clearly(node):
    s = tickwire.Subscriber(node)
    try:
        with pytest.raises(KeyError, match="40000"):
            s.subscribe("FEED", ["SYM1"], view=[40000])
        with pytest.raises(ValueError):
            s.subscribe("FEED", ["SYM1"], view=[True])
    finally:
        s.disconnect()


def test_a_view_of_one_field_name_is_that_field(node, feed):
    s = tickwire.Subscriber(node)
    try:
        s.subscribe("FEED", "SYM1", view="BID")
        refresh = first(s, "refresh", "SYM1")
        assert set(refresh.fields) == {"BID"}, refresh.fields
    finally:
        s.disconnect()


def test_a_login_held_off_for_a_while_does_not_end_a_reconnecting_subscriber(tmp_path):
    """A node holds off logins from an address after failed ones ("try again in N
    ms"): a subscriber reconnecting meanwhile is refused, then gets in once the
    hold-off is over. Only a login refused on the first connection ends a session."""
    from conftest import Proc

    config = tmp_path / "node.toml"
    config.write_text('[security]\nlogin_token = "good"\n')
    node = Proc(["node", "--listen", "127.0.0.1:0", "--config", str(config)])
    addr = node.listening_address()
    s = tickwire.Subscriber(addr, token="good", reconnect=True)
    try:
        s.subscribe("FEED", ["SYM1"])
        s.next_batch(0.5)
        node.stop()
        deadline = time.monotonic() + 30
        while s.connected and time.monotonic() < deadline:
            s.next_batch(0.2)  # until the loss is seen
        assert not s.connected
        node = Proc(["node", "--listen", addr, "--config", str(config)])
        node.listening_address()
        for _ in range(8):
            with pytest.raises(tickwire.LoginError):
                tickwire.Subscriber(addr, token="bad", user="other", reconnect=False)
        deadline = time.monotonic() + 30
        texts = []
        while not s.connected and time.monotonic() < deadline:
            texts += [e.text for e in s.next_batch(0.3) if e.type == "status"]
        assert s.connected and s.reconnects >= 1, texts
    finally:
        s.disconnect()
        node.stop()


def test_a_zero_timeout_call_delivers_what_it_read_when_a_timer_was_due(tmp_path):
    """Past a heartbeat interval (a ping due), a zero-timeout call reads what waits
    before it sends the ping, and delivers it itself rather than leave it to the next."""
    from conftest import Proc

    config = tmp_path / "node.toml"
    config.write_text("[limits]\nheartbeat_ms = 500\n")
    node = Proc(["node", "--listen", "127.0.0.1:0", "--config", str(config)])
    addr = node.listening_address()
    feed = Proc(["publish", "--node", addr, "--items", "3", "--rate", "100"])
    feed.wait_for_line("published 3 images")
    s = tickwire.Subscriber(addr)
    try:
        s.subscribe("FEED", ["SYM0", "SYM1", "SYM2"])
        deadline = time.monotonic() + 10
        refreshed = set()
        while len(refreshed) < 3 and time.monotonic() < deadline:
            refreshed |= {e.item for e in s.next_batch(0.5) if e.type == "refresh"}
        assert len(refreshed) == 3
        for _ in range(3):
            # More than one heartbeat interval (a ping due), well under three (silent).
            time.sleep(0.7)
            assert [e for e in s.next_batch(0) if e.type == "update"], "updates waited unread"
    finally:
        s.disconnect()
        feed.stop()
        node.stop()

def test_a_subscriber_dropped_after_its_session_ended_is_collected():
    """The error that ended a session is raised again without keeping the subscriber
    alive through its traceback: dropped, the subscriber is collected."""
    import gc
    import weakref

    from conftest import Proc

    node = Proc(["node", "--listen", "127.0.0.1:0"])
    s = tickwire.Subscriber(node.listening_address(), reconnect=False)
    s.subscribe("FEED", ["SYM1"])
    node.stop()
    with pytest.raises(ConnectionError):
        while True:
            s.next(timeout=20)
    with pytest.raises(ConnectionError):
        s.next(timeout=0)
    ref = weakref.ref(s)
    del s
    gc.collect()
    assert ref() is None

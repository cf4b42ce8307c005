"""tickwire.LiveView against a real node and feed: images, updates applied in the
background, data states, an item the node does not have, and the DataFrame."""

from __future__ import annotations

import time

import tickwire
from conftest import Proc, silent_address, wait_until


def _syn_sent_to(port: int) -> int:
    """Connections to `port` waiting for the answer to their SYN (/proc/net/tcp)."""
    with open("/proc/net/tcp") as f:
        rows = [line.split() for line in f.readlines()[1:]]
    return sum(1 for r in rows if r[3] == "02" and int(r[2].split(":")[1], 16) == port)


def test_closing_a_view_does_not_wait_for_its_reconnect():
    """A view whose thread is reconnecting, its TCP connect blocked for the whole
    connect_timeout (10 s) by a listener that never accepts, closes at once: close()
    waited for the thread, and so for the connect."""
    node = Proc(["node", "--listen", "127.0.0.1:0"])
    addr = node.listening_address()
    port = int(addr.rsplit(":", 1)[1])
    view = tickwire.LiveView(addr, "FEED", ["X"], connect_timeout=10.0)
    try:
        wait_until("the view to connect", lambda: view._native.connected)
        node.stop()
        with silent_address(addr):
            # The view's connect is under way once one more SYN waits at the port.
            waiting = _syn_sent_to(port)
            wait_until("the view to reconnect", lambda: _syn_sent_to(port) > waiting, 30)
            t0 = time.monotonic()
            view.close()
            closing = time.monotonic() - t0
    finally:
        view.close()
        node.stop()
    assert closing < 5.0, f"close waited {closing:.2f} s for the reconnect"


def test_a_live_view_keeps_the_latest_values_and_their_state(node):
    feed = Proc(["publish", "--node", node, "--items", "5", "--rate", "200"])
    try:
        feed.wait_for_line("published 5 images")
        with tickwire.LiveView(node, "FEED", ["SYM1", "SYM2", "NO.SUCH"], fields=["BID", "ASK"]) as view:
            view.wait_ready(timeout=20)
            assert view.state("SYM1") == "ok" and view.state("SYM2") == "ok", view
            assert set(view["SYM1"]) == {"BID", "ASK"}, view["SYM1"]
            assert view.state("NO.SUCH") == "closed" and view.text("NO.SUCH"), view
            assert view["NO.SUCH"] == {}
            assert list(view) == ["SYM1", "SYM2", "NO.SUCH"] and len(view) == 3
            # Updates are applied as they come: the quote moves while we only read.
            first = view["SYM1"]
            wait_until("SYM1's quote to move", lambda: view["SYM1"] != first)
            frame = view.frame()
            assert list(frame.index) == ["SYM1", "SYM2", "NO.SUCH"]
            assert {"BID", "ASK", "state"} <= set(frame.columns)
            assert frame.loc["SYM1", "state"] == "ok"
            # The publisher goes: the values stay, marked suspect.
            feed.stop()
            wait_until("SYM1 to turn suspect", lambda: view.state("SYM1") == "suspect")
            assert set(view["SYM1"]) == {"BID", "ASK"}
            assert view.error is None
    finally:
        feed.stop()


def test_a_view_dropped_without_close_is_collected(node):
    """Its thread holds it weakly: dropped without close(), the view is collected, its
    thread ends and its connection closes (with a ResourceWarning)."""
    import gc
    import threading
    import weakref

    import pytest

    feed = Proc(["publish", "--node", node, "--items", "2", "--rate", "50"])
    try:
        feed.wait_for_line("published 2 images")
        view = tickwire.LiveView(node, "FEED", ["SYM1"])
        view.wait_ready()
        ref, thread, native = weakref.ref(view), view._thread, view._native
        with pytest.warns(ResourceWarning):
            del view
            gc.collect()
            wait_until("the view is collected", lambda: ref() is None, 10)
        thread.join(10)
        assert not thread.is_alive()
        with pytest.raises(ConnectionError):
            native.fileno()
    finally:
        feed.stop()

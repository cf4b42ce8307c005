"""tickwire.LiveView against a real node and feed: images, updates applied in the
background, data states, an item the node does not have, and the DataFrame."""

from __future__ import annotations

import tickwire
from conftest import Proc, wait_until


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

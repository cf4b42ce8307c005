"""A subscriber and a publisher connected before `os.fork`: in the child every call
that needs the connection raises (its socket is the parent's), closing does nothing,
and the parent's connections go on undisturbed."""

from __future__ import annotations

import json
import os
import select
import signal
import time

import pytest

import tickwire
from conftest import first


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork with threads running
def test_connections_made_before_a_fork_are_refused_in_the_child_and_go_on_in_the_parent(node, feed):
    s = tickwire.Subscriber(node)
    s.subscribe("FEED", ["SYM1"])
    first(s, "refresh", "SYM1")
    p = tickwire.Publisher(node, "FORKED")
    p.refresh("A", {"BID": 1.0})
    p.flush()

    calls = {
        "subscribe": lambda: s.subscribe("FEED", ["SYM2"]),
        "next": lambda: s.next(timeout=0.1),
        "update": lambda: p.update("A", {"BID": 2.0}),
        "connected": lambda: (s.connected, p.connected),
        "disconnect": s.disconnect,
        "close": p.close,
    }
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns to pytest
        outcome = {}
        for name, call in calls.items():
            try:
                outcome[name] = repr(call())
            except RuntimeError as e:
                outcome[name] = "refused" if "before the process forked" in str(e) else repr(e)
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                outcome[name] = repr(e)
        os.write(w, json.dumps(outcome).encode())
        os._exit(0)
    os.close(w)
    got = b""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ready, _, _ = select.select([r], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(r, 65536)
        if not chunk:
            break
        got += chunk
    os.close(r)
    if not got:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    outcome = json.loads(got or b"{}")
    assert outcome == {
        "subscribe": "refused",
        "next": "refused",
        "update": "refused",
        "connected": "(False, False)",
        "disconnect": "None",
        "close": "None",
    }, outcome

    # The parent's connections were not touched: its stream goes on, its publisher
    # publishes.
    before = first(s, "update", "SYM1").seq
    assert first(s, "update", "SYM1").seq > before
    s.subscribe("FORKED", ["A"])
    assert first(s, "refresh", "A").fields["BID"] == 1.0
    p.update("A", {"BID": 3.0})
    p.flush()
    assert first(s, "update", "A").fields["BID"] == 3.0
    assert s.connected and p.connected
    p.close()
    s.disconnect()

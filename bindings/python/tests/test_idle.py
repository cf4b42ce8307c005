"""A subscriber or publisher at rest: its waits end at Ctrl-C, and it answers the node's
heartbeats while it waits for nothing, however long."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import tickwire
import tickwire.aio
from conftest import Proc

# A process that connects every kind of client to a node (so that their threads wait
# beside the main thread's), prints "waiting" and waits in the call it is given, until
# Ctrl-C: then it says so and exits 3 (os._exit).
WAITER = textwrap.dedent(
    """
    import asyncio, os, signal, sys, tickwire, tickwire.aio
    # Ctrl-C's handler, whatever this process inherited: a shell that starts a
    # command in the background without job control has it ignore SIGINT.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    addr, call = sys.argv[1], sys.argv[2]
    # A service announced down: a snapshot of it waits for an image that never comes.
    down = tickwire.Publisher(addr, "PYDOWN", start_down=True)
    feed = tickwire.Publisher(addr, "PYIDLE")
    feed.refresh("A", {"BID": 1.0})
    feed.flush()
    view = tickwire.LiveView(addr, "PYIDLE", ["A"])
    view.wait_ready()
    s = tickwire.Subscriber(addr)
    s.subscribe("PYIDLE", ["A"])
    while s.next(timeout=0.2) is not None:
        pass

    async def aio_iterate():
        a = await tickwire.aio.connect(addr)
        a.subscribe("PYIDLE", ["A"])
        print("waiting", flush=True)
        async for event in a:
            pass

    try:
        if call == "aio":
            asyncio.run(aio_iterate())
        print("waiting", flush=True)
        if call == "next":
            s.next()
        elif call == "next-timeout":
            s.next(timeout=3600)
        elif call == "snapshot":
            s.snapshot("PYDOWN", ["X"], timeout=3600)
        elif call == "iterate":
            for event in s:
                pass
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        # At once: the interpreter's exit is not what is tested.
        os._exit(3)
    """
)


@pytest.mark.parametrize("call", ["next", "next-timeout", "snapshot", "iterate", "aio"])
def test_ctrl_c_ends_a_wait_for_a_node_that_sends_nothing(node, call):
    """Ctrl-C (SIGINT) ends a wait at once, whatever its timeout, with a publisher's and a
    live view's threads waiting beside it."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WAITER, node, call], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line == "waiting\n", line + proc.stderr.read() if proc.stderr else ""
        time.sleep(0.5)  # into the wait (a signal before it is taken the same way)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (proc.returncode, out) == (3, "interrupted\n"), err


def test_idle_clients_answer_the_heartbeats_of_the_node(tmp_path):
    """Clients that wait with nothing flowing, for several of the node's heartbeat
    time-outs (three intervals of 500 ms here: long enough that a busy machine's
    scheduling is not taken for silence), are not dropped: a blocking subscriber, an
    asyncio one, a live view and a publisher."""
    config = tmp_path / "node.toml"
    config.write_text("[limits]\nheartbeat_ms = 500\n")
    node = Proc(["node", "--listen", "127.0.0.1:0", "--config", str(config)])
    addr = node.listening_address()
    p = tickwire.Publisher(addr, "PYIDLE")
    s = view = None
    try:
        p.refresh("A", {"BID": 1.0})
        p.flush()
        view = tickwire.LiveView(addr, "PYIDLE", ["A"])
        view.wait_ready()
        s = tickwire.Subscriber(addr)
        s.subscribe("PYIDLE", ["A"])

        async def idle_aio() -> list:
            a = await tickwire.aio.connect(addr)
            try:
                a.subscribe("PYIDLE", ["A"])
                got = [await asyncio.wait_for(a.next(), 10)]
                with pytest.raises(asyncio.TimeoutError):
                    got.append(await asyncio.wait_for(a.next(), 5))
                assert a.connected and a._native.reconnects == 0
                return got
            finally:
                a.disconnect()

        def idle_blocking(events: list) -> None:
            events += s.next_batch(timeout=10)
            events += s.next_batch(timeout=6)  # idle, beside the asyncio one

        events: list = []
        blocking = threading.Thread(target=idle_blocking, args=(events,))
        blocking.start()
        aio_events = asyncio.run(idle_aio())  # 5 s idle, the others meanwhile too
        blocking.join(30)
        assert not blocking.is_alive()
        assert [e.type for e in events] == ["refresh"], events
        assert [e.type for e in aio_events] == ["refresh"], aio_events
        assert s.connected and s.reconnects == 0
        assert view.state("A") == "ok" and view._native.reconnects == 0
        assert p.connected
        p.update("A", {"BID": 2.0})
        update = s.next(timeout=10)
        assert update is not None and update.type == "update", update
    finally:
        for c in (s, view):
            if c is not None:
                c.disconnect() if c is s else c.close()
        p.close()
        node.stop()
    stopped = node.wait_for_line("node stopped")
    assert "heartbeat_timeouts=0" in stopped, stopped

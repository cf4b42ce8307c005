"""The Python Publisher: its values by the dictionary's types, its loss seen by
subscribers (suspect, then ok), and a Rust subscriber (`tickwire subscribe`) reading it."""

from __future__ import annotations

import contextlib
import datetime
import decimal
import json
import pickle
import signal
import subprocess
import time
from typing import Iterator

import pytest

import tickwire
from conftest import Proc, first, silent_address, tickwire_bin


def test_values_arrive_with_their_types(node):
    with tickwire.Publisher(node, "PYFEED") as p:
        stamp = datetime.datetime(2026, 11, 24, 9, 30, 0, 250000, tzinfo=datetime.timezone.utc)
        p.refresh(
            "EUR=",
            {
                "DSPLY_NAME": "EURO",
                "DSPLY_NMLL": "euro €",
                "BID": 1.0841,
                "ASK": decimal.Decimal("1.0843"),
                "HST_CLOSE": "1.08",
                "OPEN_PRC": 1,
                "BIDSIZE": 5000,
                "CURRENCY": 978,
                "TRADE_DATE": datetime.date(2026, 11, 24),
                "TIMACT": datetime.time(9, 30, 0, 250000),
                "QUOTIM": stamp,
                "TIM_TRK_1": stamp,
                "NEWS": None,
                3902 + 1: 7,  # TIM_TRK_2, by field id
            },
        )
        s = tickwire.Subscriber(node)
        s.wait_for_service("PYFEED")
        image = s.snapshot("PYFEED", ["EUR="])["EUR="]
        assert image == {
            "DSPLY_NAME": "EURO",
            "DSPLY_NMLL": "euro €",
            "BID": 1.0841,
            "ASK": 1.0843,
            "HST_CLOSE": 1.08,
            "OPEN_PRC": 1.0,
            "BIDSIZE": 5000,
            "CURRENCY": 978,
            "TRADE_DATE": datetime.date(2026, 11, 24),
            "TIMACT": datetime.time(9, 30, 0, 250000),
            "QUOTIM": datetime.time(9, 30, 0, 250000),
            "TIM_TRK_1": 1795512600250000000,
            "NEWS": None,
            "TIM_TRK_2": 7,
        }


def test_a_value_that_does_not_fit_its_field_is_refused_with_its_name(node):
    with tickwire.Publisher(node, "PYFEED") as p:
        with pytest.raises(KeyError, match="publish a refresh"):
            p.update("X", {"BID": 1.0})
        p.refresh("X", {"BID": 1.0})
        with pytest.raises(ValueError, match=r"field BID \(REAL\).*not a decimal"):
            p.update("X", {"BID": "abc"})
        with pytest.raises(ValueError, match=r"field BIDSIZE \(UINT\)"):
            p.update("X", {"BIDSIZE": -1})
        with pytest.raises(ValueError, match=r"field BID .*bool"):
            p.update("X", {"BID": True})
        with pytest.raises(ValueError, match=r"field DSPLY_NAME \(ASCII\)"):
            p.update("X", {"DSPLY_NAME": "café"})
        with pytest.raises(ValueError, match=r"field BID .*finite"):
            p.update("X", {"BID": float("nan")})
        with pytest.raises(KeyError, match="NOT_A_FIELD"):
            p.update("X", {"NOT_A_FIELD": 1})
        with pytest.raises(ValueError, match="update_type"):
            p.update("X", {"BID": 1.0}, update_type="bogus")
        assert p.items == ["X"]


def test_a_lost_publisher_makes_its_items_suspect_and_a_new_one_ok(node):
    p = tickwire.Publisher(node, "PYFEED")
    p.refresh("GBP=", {"BID": 1.25, "ASK": 1.26})
    s = tickwire.Subscriber(node)
    s.wait_for_service("PYFEED")
    s.subscribe("PYFEED", ["GBP="])
    assert first(s, "refresh", "GBP=").data_state == "ok"
    p.update("GBP=", {"BID": 1.2501}, update_type="quote")
    assert first(s, "update", "GBP=").fields == {"BID": 1.2501}
    p.close()
    lost = first(s, "status", "GBP=")
    assert (lost.stream_state, lost.data_state) == ("open", "suspect")
    again = tickwire.Publisher(node, "PYFEED")
    again.refresh("GBP=", {"BID": 1.27, "ASK": 1.28})
    back = first(s, "refresh", "GBP=")
    assert (back.stream_state, back.data_state) == ("open", "ok")
    assert back.fields == {"BID": 1.27, "ASK": 1.28}
    again.close()


def test_a_python_publisher_feeds_a_rust_subscriber(node):
    with tickwire.Publisher(node, "PYFEED") as p:
        p.refresh("JPY=", {"DSPLY_NAME": "YEN", "BID": 151.25, "ASK": 151.27})
        s = tickwire.Subscriber(node)
        s.wait_for_service("PYFEED")
        rust = subprocess.Popen(
            [tickwire_bin(), "subscribe", "--node", node, "--service", "PYFEED", "--json", "--count", "3",
             "--timeout", "30", "JPY="],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert rust.stdout is not None
        refresh = json.loads(rust.stdout.readline())
        assert refresh["type"] == "refresh"
        assert refresh["fields"] == {"DSPLY_NAME": "YEN", "BID": 151.25, "ASK": 151.27}
        p.update("JPY=", {"BID": 151.26}, update_type="quote")
        p.update("JPY=", {"ASK": 151.3, "BID": 151.28}, update_type="quote")
        out, err = rust.communicate(timeout=30)
        assert rust.returncode == 0, err
        updates = [json.loads(line) for line in out.splitlines()]
        assert [u["fields"] for u in updates] == [{"BID": 151.26}, {"ASK": 151.3, "BID": 151.28}]
        assert [u["update_type"] for u in updates] == ["quote", "quote"]


def test_a_post_gets_the_publishers_answer(posts_node):
    s = tickwire.Subscriber(posts_node)
    s.subscribe("FEED", ["SYM1"])
    assert first(s, "refresh", "SYM1").fields["BID"] != 101.25
    ack = s.post("FEED", "SYM1", {"BID": 101.25, "ASK": 101.30})
    assert ack.type == "ack" and ack.accepted, ack
    assert (ack.service, ack.item, ack.nak) == ("FEED", "SYM1", None)
    # The feed applied it: every subscriber sees the posted quote.
    update = first(s, "update", "SYM1")
    assert (update.fields["BID"], update.fields["ASK"]) == (101.25, 101.3)
    # A field the feed does not take: refused with its reason.
    refused = s.post("FEED", "SYM1", {"TRDPRC_1": 5.0})
    assert refused.accepted is False and refused.nak == "InvalidContent", refused
    assert "only BID and ASK" in refused.text
    # Without an answer asked for: sent, nothing awaited.
    assert s.post("FEED", "SYM2", {"BID": 1.0, "ASK": 2.0}, ack=False) is None


def test_dates_with_times_and_buffers_arrive_unchanged(node, tmp_path):
    # A dictionary with a DATETIME and a BUFFER field (RSSL's types of the same names).
    dictionary = tmp_path / "fields.dict"
    dictionary.write_text("DSPLY_NAME 3 ASCII\nSTAMP 9001 DATETIME\nBLOB 9002 BUFFER\n")
    stamp = datetime.datetime(2026, 11, 24, 9, 30, 0, 250000)
    with tickwire.Publisher(node, "PYTYPES", dictionary=str(dictionary)) as p:
        p.refresh("A", {"DSPLY_NAME": "A", "STAMP": stamp, "BLOB": b"\x00\xff\x1b"})
        # The same values as the text forms the command line and JSON use.
        p.refresh("B", {"DSPLY_NAME": "B", "STAMP": "2026-11-24T09:30:00.25", "BLOB": "AP8b"})
        s = tickwire.Subscriber(node, dictionary=str(dictionary))
        s.wait_for_service("PYTYPES")
        images = s.snapshot("PYTYPES", ["A", "B"])
        for name in ("A", "B"):
            assert images[name]["STAMP"] == stamp, images
            assert images[name]["BLOB"] == b"\x00\xff\x1b", images
        with pytest.raises(ValueError, match="BLOB"):
            p.refresh("C", {"BLOB": "not base64!"})


def test_a_naive_datetime_is_utc_in_every_field(node, tmp_path, monkeypatch):
    """A naive datetime is UTC both in a DATETIME field (which reads back naive, in
    UTC) and as nanoseconds since the epoch in an INT/UINT one (TIM_TRK_1), whatever the
    local time zone."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        dictionary = tmp_path / "fields.dict"
        dictionary.write_text("STAMP 9001 DATETIME\nTIM_TRK_1 3902 UINT\n")
        naive = datetime.datetime(2026, 11, 24, 9, 30)
        with tickwire.Publisher(node, "PYTIME", dictionary=str(dictionary)) as p:
            p.refresh("A", {"STAMP": naive, "TIM_TRK_1": naive})
            s = tickwire.Subscriber(node, dictionary=str(dictionary))
            s.wait_for_service("PYTIME")
            image = s.snapshot("PYTIME", ["A"])["A"]
            s.disconnect()
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    utc = naive.replace(tzinfo=datetime.timezone.utc)
    assert image["STAMP"] == naive, image
    assert image["TIM_TRK_1"] == int(utc.timestamp()) * 10**9, image


def test_numpy_numbers_are_taken_and_bad_keys_and_values_named(node):
    import numpy as np

    with tickwire.Publisher(node, "PYNUM") as p:
        p.refresh("A", {"BID": np.float32(1.5), "ASK": np.int64(2), "BIDSIZE": np.int64(5), "CURRENCY": np.uint16(840)})
        s = tickwire.Subscriber(node)
        s.wait_for_service("PYNUM")
        image = s.snapshot("PYNUM", ["A"])["A"]
        s.disconnect()
        assert (image["BID"], image["ASK"], image["BIDSIZE"], image["CURRENCY"]) == (1.5, 2.0, 5, 840), image
        with pytest.raises(KeyError, match="40000"):
            p.refresh("B", {40000: 1})
        with pytest.raises(TypeError, match="bool"):
            p.refresh("B", {True: 1})
        with pytest.raises(ValueError, match="1e300"):
            p.refresh("B", {"BID": 1e300})
        aware = datetime.time(1, 2, 3, tzinfo=datetime.timezone(datetime.timedelta(hours=5)))
        with pytest.raises(ValueError, match="TIMACT.*aware"):
            p.refresh("B", {"TIMACT": aware})


def test_an_int_too_large_for_a_real_is_refused_however_large(node):
    """An int is taken exactly or not at all: one past 64 bits is refused, even one
    past 128 bits (which would otherwise pass as the nearest float)."""
    with tickwire.Publisher(node, "PYBIG") as p:
        for big in (2**70, 2**130, -(2**200)):
            with pytest.raises(ValueError, match=r"field BID \(REAL\): -?\d+ does not fit 64 bits"):
                p.refresh("A", {"BID": big})
        # A float whose exponent does not fit says so, not only its digits.
        with pytest.raises(ValueError, match=r"1e-200 does not fit a decimal \(at most 18 digits, times 10 to the power -128 to 127\)"):
            p.refresh("A", {"BID": 1e-200})
        assert p.items == []


class Interrupted(Exception):
    """Raised by the SIGALRM handler of `publisher_of_a_stopped_node`, as Ctrl-C's
    KeyboardInterrupt would be."""


@contextlib.contextmanager
def publisher_of_a_stopped_node() -> Iterator[tickwire.Publisher]:
    """A publisher connected to a node whose process is then stopped (it reads
    nothing), with SIGALRM raising `Interrupted`; the node goes on and ends after."""
    def interrupt(*_):
        raise Interrupted()

    node = Proc(["node", "--listen", "127.0.0.1:0"])
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        p = tickwire.Publisher(node.listening_address(), "PYFEED")
        node.proc.send_signal(signal.SIGSTOP)
        yield p
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        node.proc.send_signal(signal.SIGCONT)
        node.stop()


def test_a_flush_waiting_for_a_stopped_node_is_interrupted_by_a_signal():
    """Ctrl-C ends a flush that waits for a node that reads nothing, at once rather than
    at the flush's timeout."""
    with publisher_of_a_stopped_node() as p:
        big = "x" * 60000
        for i in range(1000):  # until the socket's buffers are full
            p.refresh(f"I{i}", {"DSPLY_NAME": big})
            try:
                p.flush(timeout=0.2)
            except TimeoutError:
                # Full only if it stays so: on a busy host the kernel may still open
                # the stopped node's window a little later (as it compacts what it
                # holds), and a flush would then finish before the signal.
                try:
                    p.flush(timeout=1.0)
                except TimeoutError:
                    break
        else:
            pytest.fail("a stopped node took 60 MB")
        assert p.connected, "the publisher gave the stopped node up before the flush"
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        start = time.monotonic()
        with pytest.raises(Interrupted):
            p.flush(timeout=30)
        assert time.monotonic() - start < 10


def test_a_refresh_held_back_for_a_stopped_node_is_interrupted_by_a_signal():
    """Past the library's high-water mark a refresh waits for the node to take what is
    queued (10 s at most): Ctrl-C (here a signal every 0.5 s) ends that wait at once."""
    interrupted, longest = 0, 0.0
    with publisher_of_a_stopped_node() as p:
        big = "x" * 60000
        signal.setitimer(signal.ITIMER_REAL, 0.5, 0.5)
        # 6 s of images of 60 KB: the sockets' buffers and then the library's 4 MiB
        # fill within the first, and the library gives the node up only after 10 s.
        end = time.monotonic() + 6
        i = 0
        while time.monotonic() < end:
            start = time.monotonic()
            try:
                p.refresh(f"I{i % 300}", {"DSPLY_NAME": big})
                i += 1
            except Interrupted:
                interrupted += 1
            longest = max(longest, time.monotonic() - start)
        signal.setitimer(signal.ITIMER_REAL, 0)
    assert interrupted >= 3, f"{i} images in 6 s, {interrupted} interrupted"
    assert longest < 2, f"a refresh took {longest:.1f} s with a signal every 0.5 s"


def test_a_numpy_bool_is_refused_as_a_bool_is(node):
    import numpy as np

    with tickwire.Publisher(node, "NP") as p:
        for value in (True, np.True_):
            with pytest.raises(ValueError, match="bool"):
                p.refresh("X", {"BID": value})


def test_an_aware_datetime_gives_a_date_field_its_utc_date(node):
    """23:00 at UTC-5 is the next day in UTC: a DATE field takes that day, as a
    TIM_TRK_1 (nanoseconds since the epoch) takes that instant."""
    when = datetime.datetime(2026, 1, 1, 23, 0, tzinfo=datetime.timezone(datetime.timedelta(hours=-5)))
    with tickwire.Publisher(node, "D") as p:
        p.refresh("X", {"TRADE_DATE": when, "TIM_TRK_1": when})
        p.flush()
        s = tickwire.Subscriber(node)
        try:
            image = s.snapshot("D", ["X"], timeout=10)["X"]
        finally:
            s.disconnect()
    instant = datetime.datetime.fromtimestamp(image["TIM_TRK_1"] / 1e9, datetime.timezone.utc)
    assert image["TRADE_DATE"] == instant.date() == datetime.date(2026, 1, 2)


def test_events_of_every_kind_pickle_and_come_back_equal(posts_node):
    s = tickwire.Subscriber(posts_node)
    s.subscribe("FEED", ["SYM1", "NOPE"])
    events = [first(s, "refresh", "SYM1"), first(s, "status", "NOPE")]
    events.append(s.post("FEED", "SYM1", {"BID": 101.25, "ASK": 101.30}))
    events.append(first(s, "update", "SYM1"))
    events.append(s.post("FEED", "SYM1", {"TRDPRC_1": 5.0}))
    names = ["type", "service", "item", "stream", "fields", "seq", "complete", "update_type",
             "stream_state", "data_state", "code", "text", "post_id", "accepted", "nak"]
    for event in events:
        back = pickle.loads(pickle.dumps(event))
        assert type(back) is type(event)
        assert {n: getattr(back, n) for n in names} == {n: getattr(event, n) for n in names}, event
        assert repr(back) == repr(event)
    assert events[-1].nak == "InvalidContent" and events[1].stream_state == "closed"
    # What no event holds is refused by name, not made up.
    state = events[0].__reduce__()[1][0]
    with pytest.raises(ValueError, match="not an event's data_state"):
        tickwire._native._event({**state, "data_state": "stale"})


def test_publishing_does_not_wait_for_a_reconnect():
    """While the publisher's driver thread reconnects, its TCP connect blocked for the
    whole connect_timeout (10 s) by a listener that never accepts, `update` goes on (the
    library keeps the image for the next connection), and so does `close`: they once
    waited for the lock, or the thread, held through the connect."""
    node = Proc(["node", "--listen", "127.0.0.1:0"])
    addr = node.listening_address()
    p = tickwire.Publisher(addr, "PYFEED", connect_timeout=10.0)
    try:
        p.refresh("EUR=", {"BID": 1.0})
        p.flush()
        node.stop()
        deadline = time.monotonic() + 30
        while p.connected:
            assert time.monotonic() < deadline, "the publisher never saw the node go"
            time.sleep(0.01)
        with silent_address(addr):
            longest, calls = 0.0, 0
            start = time.monotonic()
            while time.monotonic() - start < 3.0:
                t0 = time.monotonic()
                p.update("EUR=", {"BID": 1.0 + calls / 1000})
                longest = max(longest, time.monotonic() - t0)
                calls += 1
                time.sleep(0.05)
            connected = p.connected
            # Nor does closing it wait for the connect.
            t0 = time.monotonic()
            p.close(timeout=0.1)
            closing = time.monotonic() - t0
    finally:
        p.close(timeout=0.1)
        node.stop()
    assert calls > 1 and not connected, (calls, connected)
    assert longest < 5.0, f"an update waited {longest:.2f} s for the reconnect"
    assert closing < 5.0, f"close waited {closing:.2f} s for the reconnect"

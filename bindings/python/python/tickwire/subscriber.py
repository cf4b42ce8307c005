"""The Python Subscriber: the native one, with an event buffer so that snapshots taken
while streaming lose no event, blocking and asyncio iteration, and DataFrames."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import time
from typing import TYPE_CHECKING, Any, AsyncIterator, Deque, Dict, Iterable, Iterator, List, Optional, Sequence, Union

from . import _native
from ._native import Event, TickwireError

if TYPE_CHECKING:  # pragma: no cover
    import pandas
    from typing_extensions import Unpack

    from ._native import ConnectArgs

Items = Union[str, Iterable[str]]
Fields = Sequence[Union[str, int]]

# How often an asyncio iteration looks at a reconnection (which the library makes in
# the executor) while the connection is lost; connected, it runs the library's timers
# (a heartbeat to send, the node's silence to judge) at the deadline the library says,
# at most _LONGEST apart.
_TIMERS_EVERY = 0.5
_LONGEST = 30.0


def _names(items: Items) -> List[str]:
    if isinstance(items, str):
        return [items]
    names = list(items)
    if not all(isinstance(n, str) for n in names):
        raise TypeError("items are names (str)")
    return names


def _view(view: Optional[Fields]) -> Optional[List[Union[str, int]]]:
    """A view's fields as a list; one field name alone is a view of that field."""
    if view is None:
        return None
    if isinstance(view, str):
        return [view]
    return list(view)


def _check_timeout(timeout: float) -> None:
    """A timeout is checked before anything is sent (a snapshot's streams, a post)."""
    if not 0 <= timeout < math.inf:  # NaN too
        raise ValueError(f"timeout must be a number of seconds, 0 or more (got {timeout!r})")


class _Images:
    """What a snapshot has gathered so far: the streams still awaited (stream id ->
    item), the items' images, and the items the node could not give (item -> why). The
    blocking snapshot and the asyncio one (``tickwire.aio``) keep it the same way."""

    def __init__(self, service: str, names: Dict[int, str]) -> None:
        self.service = service
        self.waiting = dict(names)
        self.images: Dict[str, Dict[str, Any]] = {name: {} for name in names.values()}
        self.failed: Dict[str, str] = {}

    def take(self, event: Event) -> None:
        """An event of an awaited stream: its image's fields, or the reason it ended."""
        name = self.waiting[event.stream]
        if event.type == "refresh":
            self.images[name].update(event.fields)
            if event.complete:
                del self.waiting[event.stream]
        elif event.type == "status" and event.stream_state != "open":
            self.failed[name] = event.text or event.stream_state or "closed"
            del self.waiting[event.stream]

    def timed_out(self, timeout: float) -> TimeoutError:
        return TimeoutError(
            f"no complete image of {sorted(self.waiting.values())} from {self.service} within {timeout} s"
        )

    def result(self) -> Dict[str, Dict[str, Any]]:
        """The images, once none is awaited; ``TickwireError`` naming every item the
        node could not give."""
        if self.failed:
            reasons = "; ".join(f"{n}: {why}" for n, why in sorted(self.failed.items()))
            raise TickwireError(f"{self.service}: no image of {len(self.failed)} item(s): {reasons}")
        return self.images


class Subscriber:
    """A connection to a node that subscribes to items and delivers their events.

    ``address`` is the node's ``host:port``; the keyword arguments, all optional, are
    those of every class that connects (``Publisher``, ``LiveView``, ``aio.connect``):
    ``user`` and ``token`` log in (the node's users file); ``application`` is the name
    the node's log gives the connection; ``connect_timeout`` (5.0 s) bounds the
    connection and the login; ``ca_file`` connects with TLS, trusting that PEM file;
    ``dictionary`` is a field dictionary file (the built-in MarketPrice one by default).
    With ``reconnect`` (True by default) a lost connection is re-established with
    backoff: its streams turn suspect, then each gets a new refresh.

    The constructor connects and raises ``ConnectionError`` if the node cannot be
    reached, ``tickwire.LoginError`` if it refuses the login.
    """

    def __init__(self, address: str, **connect: Unpack[ConnectArgs]) -> None:
        self._native = _native.Subscriber(_native.Connect(address, **connect))
        self._buffer: Deque[Event] = collections.deque()
        # An asyncio wait's read in the executor, while it runs or until it is taken.
        self._reading: "Optional[asyncio.Future[List[Event]]]" = None

    # -- streams -----------------------------------------------------------------

    def subscribe(self, service: str, items: Items, *, view: Optional[Fields] = None) -> List[int]:
        """Opens a stream per item (a refresh, then updates); returns their stream ids.
        With ``view`` (field names or ids) only those fields are sent."""
        return self._native.subscribe(service, _names(items), view=_view(view))

    def view(self, service: str, items: Items, fields: Fields) -> List[int]:
        """Subscribes to the items for these fields only."""
        return self.subscribe(service, items, view=fields)

    def close(self, service: str, items: Items) -> None:
        """Closes the items' streams (``KeyError`` for one that is not open)."""
        self._native.close(service, _names(items))

    def change_view(self, service: str, items: Items, *, view: Optional[Fields] = None) -> None:
        """Changes the view of the items' open streams where they stand (``None``: every
        field), with no new image: the updates from now on carry the new view
        (``KeyError`` for an item that is not open)."""
        self._native.change_view(service, _names(items), view=_view(view))

    def snapshot(
        self,
        service: str,
        items: Items,
        *,
        view: Optional[Fields] = None,
        timeout: float = 10.0,
    ) -> Dict[str, Dict[str, Any]]:
        """The current image of each item, as {item: {field: value}}.

        Raises ``tickwire.TickwireError`` naming every item the node could not give
        (with its reason), and ``TimeoutError`` naming those still awaited after
        ``timeout`` seconds. Events of other streams that arrive meanwhile are kept
        for iteration."""
        _check_timeout(timeout)
        names = _names(items)
        sids = self._native.subscribe(service, names, view=_view(view), snapshot=True)
        gathered = _Images(service, dict(zip(sids, names)))
        deadline = time.monotonic() + timeout
        try:
            while gathered.waiting:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise gathered.timed_out(timeout)
                for event in self._native.next_events(left):
                    if event.stream in gathered.waiting and event.service == service:
                        gathered.take(event)
                    else:
                        self._buffer.append(event)
        except BaseException:
            # Given up (its timeout, Ctrl-C, an error): its streams are closed. Left
            # open, each would be asked for again after every reconnection, and its
            # late image come as an event.
            with contextlib.suppress(ConnectionError):
                self._native.close_ids(list(gathered.waiting))
            raise
        return gathered.result()

    def snapshot_frame(
        self,
        service: str,
        items: Items,
        *,
        fields: Optional[Fields] = None,
        timeout: float = 10.0,
    ) -> "pandas.DataFrame":
        """The snapshot as a pandas DataFrame: one row per item (its name the index),
        one column per field (only ``fields``, in that order, when given). Needs pandas
        (``pip install tickwire[pandas]``)."""
        try:
            import pandas
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("snapshot_frame needs pandas: pip install pandas") from e
        images = self.snapshot(service, items, view=fields, timeout=timeout)
        frame = pandas.DataFrame.from_dict(images, orient="index")
        if fields is not None:
            frame = frame.reindex(columns=_view(fields))
        return frame

    def post(
        self,
        service: str,
        item: str,
        fields: Dict[Union[str, int], Any],
        *,
        ack: bool = True,
        timeout: float = 5.0,
    ) -> Optional[Event]:
        """Posts (contributes) field values to an item, as the node's publisher of the
        service takes them (the node must take posts for it: `[posts] services`).

        With ``ack`` (the default) waits for the answer and returns it: an event of
        type "ack" with ``accepted``, and for a refusal ``nak`` (the WebSocket API's
        code name, e.g. "DeniedBySrc") and ``text`` (why). ``TimeoutError`` if none
        came in ``timeout`` seconds. Events of the streams that arrive meanwhile are
        kept for iteration. Without ``ack``, returns None once the post is sent."""
        _check_timeout(timeout)
        post_id = self._native.send_post(service, item, dict(fields), ack=ack)
        return self._native.answer(post_id, timeout) if ack else None

    def services(self) -> Dict[str, str]:
        """The node's services and their state ("up" or "down"), as far as its
        directory messages have been read (they arrive with the events)."""
        return self._native.services()

    def wait_for_service(self, service: str, timeout: float = 10.0) -> None:
        """Waits until the node's directory lists ``service`` up (a publisher that has
        just connected may not be there yet); events that arrive meanwhile are kept
        for iteration. ``TimeoutError`` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while self._native.services().get(service) != "up":
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"service {service!r} is not up after {timeout} s (services: {self.services()})")
            self._buffer.extend(self._native.next_events(min(left, 0.1)))

    @property
    def connected(self) -> bool:
        """Connected now (False while reconnecting)."""
        return self._native.connected

    @property
    def reconnects(self) -> int:
        """Times the connection was re-established."""
        return self._native.reconnects

    # -- events ------------------------------------------------------------------

    def next(self, timeout: Optional[float] = None) -> Optional[Event]:
        """The next event, waiting up to ``timeout`` seconds (forever with None);
        None if none came. Ctrl-C interrupts the wait."""
        if not self._buffer:
            self._buffer.extend(self._native.next_events(timeout))
        return self._buffer.popleft() if self._buffer else None

    def next_batch(self, timeout: Optional[float] = None) -> List[Event]:
        """Every event available, waiting up to ``timeout`` seconds for the first (an
        empty list if none came): one call into the library per batch, the fastest
        way to take a busy stream."""
        if self._buffer:
            batch = list(self._buffer)
            self._buffer.clear()
            return batch
        return self._native.next_events(timeout)

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        event = self.next(None)
        assert event is not None  # a wait without timeout returns an event or raises
        return event

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        """Awaits the next event with the event loop watching the connection's socket
        (no thread waits); ``tickwire.aio`` has snapshots and posts to await too."""
        loop = asyncio.get_running_loop()
        while not self._buffer:
            fd = self._native.fileno()
            if fd is None:
                # Reconnecting, which blocks: in the loop's executor. A wait cancelled
                # meanwhile (a timeout around it) leaves the read running: what it
                # brings is the next wait's, not lost.
                if self._reading is None or self._reading.cancelled():
                    self._reading = loop.run_in_executor(None, self._native.next_events, _TIMERS_EVERY)
                reading = self._reading
                try:
                    events = await asyncio.shield(reading)
                except asyncio.CancelledError:
                    raise
                except BaseException:
                    self._reading = None
                    raise
                self._reading = None
                self._buffer.extend(events)
                continue
            until, write = self._native.wait_hint()
            ready = loop.create_future()
            loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
            if write:  # output waits for the socket: written by next_events
                loop.add_writer(fd, lambda: ready.done() or ready.set_result(None))
            try:
                # The library's timers (heartbeats) run at its next deadline.
                await asyncio.wait_for(ready, _LONGEST if until is None else min(max(until, 0.001), _LONGEST))
            except asyncio.TimeoutError:
                pass
            finally:
                loop.remove_reader(fd)
                if write:
                    loop.remove_writer(fd)
            self._buffer.extend(self._native.next_events(0))
        return self._buffer.popleft()

    # -- lifetime ----------------------------------------------------------------

    def disconnect(self) -> None:
        """Closes the connection; the subscriber cannot be used afterwards."""
        self._native.disconnect()

    def __enter__(self) -> "Subscriber":
        return self

    def __exit__(self, *exc: object) -> None:
        self.disconnect()

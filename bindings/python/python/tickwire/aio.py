"""asyncio: a Subscriber whose waits cost no thread and no polling.

The event loop watches the connection's socket (``loop.add_reader``) and reads what
arrived when it is readable; a snapshot or a post's answer is a future resolved by the
events as they come; ``async for`` awaits the next batch.

    import asyncio, tickwire.aio

    async def main():
        s = await tickwire.aio.connect("127.0.0.1:14002")
        print(await s.snapshot("FEED", ["SYM1", "SYM2"]))
        s.subscribe("FEED", ["SYM1"])
        async for event in s:
            print(event.type, event.item, event.fields)

    asyncio.run(main())

Connecting (a TCP connect and a login) runs in the loop's default executor, once; so
do the library's reconnections while the connection is lost (there is no socket to
watch then), so that a slow or unreachable node never holds the loop.
"""

from __future__ import annotations

import asyncio
import collections
import functools
from typing import Any, AsyncIterator, Deque, Dict, List, Optional, Sequence, Union

from . import _native
from ._native import Event, TickwireError  # noqa: F401 (tickwire.aio.TickwireError stays)
from .subscriber import Fields, Items, _Images, _names

# How often the library's timers (its heartbeats, a reconnection's back-off) are run
# when nothing arrives: the node's own heartbeats wake the reader more often than this.
_TIMERS_EVERY = 0.5
# Events that may wait for the application; past it the socket is not read until the
# application has taken half of them, so that the node sees a slow consumer (and
# conflates or, past its bounds, disconnects it) instead of this process holding
# everything it sent.
_MAX_WAITING = 100_000


async def connect(address: str, **connect: Any) -> "Subscriber":
    """Connects and logs in without blocking the event loop. ``connect`` takes
    ``tickwire.Subscriber``'s arguments (user, token, application, connect_timeout,
    reconnect, ca_file, dictionary), and fails as it does (``ConnectionError``,
    ``tickwire.LoginError``)."""
    loop = asyncio.get_running_loop()
    native = await loop.run_in_executor(None, functools.partial(_native.Subscriber, address, **connect))
    return Subscriber(native, loop)


class _Snapshot(_Images):
    """A snapshot's images, and a future resolved once none is awaited."""

    def __init__(self, service: str, names: Dict[int, str]) -> None:
        super().__init__(service, names)
        self.done: "asyncio.Future[None]" = asyncio.get_running_loop().create_future()

    def take(self, event: Event) -> None:
        if event.stream not in self.waiting:
            return
        super().take(event)
        if not self.waiting and not self.done.done():
            self.done.set_result(None)


class Subscriber:
    """An asyncio subscriber (make one with ``await tickwire.aio.connect(...)``).

    ``subscribe``, ``close`` and ``services`` only send or read and return at once;
    ``snapshot``, ``post`` and iteration are awaited."""

    def __init__(self, native: "_native.Subscriber", loop: asyncio.AbstractEventLoop) -> None:
        self._native = native
        self._loop = loop
        self._events: Deque[Event] = collections.deque()
        self._waiter: Optional["asyncio.Future[None]"] = None
        self._snapshots: Dict[int, _Snapshot] = {}
        self._answers: Dict[int, "asyncio.Future[Event]"] = {}
        self._error: Optional[BaseException] = None
        self._fd: Optional[int] = None
        self._reconnecting = False
        self._closed = False
        self._paused = False
        self._watch()
        self._timer = loop.call_later(_TIMERS_EVERY, self._on_timer)

    # -- the loop's side -----------------------------------------------------------

    def _watch(self) -> None:
        """Watches the connection's socket (a reconnection makes a new one)."""
        fd = None if self._closed else self._native.fileno()
        if fd == self._fd:
            return
        if self._fd is not None:
            self._loop.remove_reader(self._fd)
        self._fd = fd
        if fd is not None and not self._paused:
            self._loop.add_reader(fd, self._read)

    def _read(self) -> None:
        """The socket is readable (or a timer is due): what arrived, without waiting."""
        if self._closed:
            return
        if len(self._events) >= _MAX_WAITING and not self._awaited():
            # The application is behind: the socket waits until it takes events (or
            # awaits a snapshot or a post's answer, which only reading can bring).
            if not self._paused and self._fd is not None:
                self._loop.remove_reader(self._fd)
            self._paused = True
            return
        try:
            events = self._native.next_events(0)
        except BaseException as e:  # the connection is gone for good
            self._fail(e)
            return
        self._take(events)
        self._watch()

    def _take(self, events: List[Event]) -> None:
        for event in events:
            snapshot = self._snapshots.get(event.stream)
            if snapshot is not None and event.service == snapshot.service:
                snapshot.take(event)
                if event.stream not in snapshot.waiting:
                    del self._snapshots[event.stream]
                continue
            if event.type == "ack" and event.post_id in self._answers:
                answer = self._answers.pop(event.post_id)
                if not answer.done():
                    answer.set_result(event)
                continue
            self._events.append(event)
        if self._events and self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _on_timer(self) -> None:
        if self._closed:
            return
        if self._fd is not None:
            self._read()
        elif not self._reconnecting:
            # No socket: the library reconnects, which blocks; in the executor.
            self._reconnecting = True
            future = self._loop.run_in_executor(None, self._native.next_events, 0)
            future.add_done_callback(self._reconnected)
        self._timer = self._loop.call_later(_TIMERS_EVERY, self._on_timer)

    def _reconnected(self, future: "asyncio.Future[List[Event]]") -> None:
        self._reconnecting = False
        if self._closed:
            return
        if future.exception() is not None:
            self._fail(future.exception())
            return
        self._take(future.result())
        self._watch()

    def _fail(self, error: BaseException) -> None:
        self._error = error
        for waiting in [self._waiter, *self._answers.values(), *(s.done for s in self._snapshots.values())]:
            if waiting is not None and not waiting.done():
                waiting.set_exception(error)
        self._answers.clear()
        self._snapshots.clear()
        self._stop_watching()

    def _stop_watching(self) -> None:
        if self._fd is not None:
            if not self._paused:
                self._loop.remove_reader(self._fd)
            self._fd = None
        self._timer.cancel()

    # -- streams -------------------------------------------------------------------

    def subscribe(self, service: str, items: Items, *, view: Optional[Fields] = None) -> List[int]:
        """Opens a stream per item (a refresh, then updates); their stream ids."""
        return self._native.subscribe(service, _names(items), view=list(view) if view is not None else None)

    def close(self, service: str, items: Items) -> None:
        """Closes the items' streams (``KeyError`` for one that is not open)."""
        self._native.close(service, _names(items))

    def change_view(self, service: str, items: Items, *, view: Optional[Fields] = None) -> None:
        """Changes the view of the items' open streams where they stand (``None``: every
        field), with no new image: the updates from now on carry the new view
        (``KeyError`` for an item that is not open)."""
        self._native.change_view(service, _names(items), view=list(view) if view is not None else None)

    def services(self) -> Dict[str, str]:
        """The node's services and their state ("up" or "down"), as read so far."""
        return self._native.services()

    async def snapshot(
        self,
        service: str,
        items: Items,
        *,
        view: Optional[Fields] = None,
        timeout: float = 10.0,
    ) -> Dict[str, Dict[str, Any]]:
        """The current image of each item, as {item: {field: value}} (as
        ``tickwire.Subscriber.snapshot``: ``TickwireError`` naming the items the node
        could not give, ``TimeoutError`` after ``timeout`` seconds)."""
        self._raise_if_failed()
        names = _names(items)
        sids = self._native.subscribe(service, names, view=list(view) if view is not None else None, snapshot=True)
        snapshot = _Snapshot(service, dict(zip(sids, names)))
        for sid in sids:
            self._snapshots[sid] = snapshot
        self._resume_if_drained()
        try:
            await asyncio.wait_for(asyncio.shield(snapshot.done), timeout)
        except asyncio.TimeoutError:
            # Their streams are closed (see tickwire.Subscriber.snapshot).
            if not self._closed and self._error is None:
                self._native.close_ids(list(snapshot.waiting))
            raise snapshot.timed_out(timeout) from None
        finally:
            for sid in sids:
                self._snapshots.pop(sid, None)
        return snapshot.result()

    async def post(
        self,
        service: str,
        item: str,
        fields: Dict[Union[str, int], Any],
        *,
        ack: bool = True,
        timeout: float = 5.0,
    ) -> Optional[Event]:
        """Posts field values to an item; with ``ack`` awaits the answer (an "ack"
        event: ``accepted``, and for a refusal ``nak`` and ``text``; ``TimeoutError``
        after ``timeout`` seconds), else returns None once it is sent."""
        self._raise_if_failed()
        post_id = self._native.send_post(service, item, dict(fields), ack=ack)
        if not ack:
            return None
        answer: "asyncio.Future[Event]" = self._loop.create_future()
        self._answers[post_id] = answer
        self._resume_if_drained()
        try:
            return await asyncio.wait_for(answer, timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"no answer to post {post_id} to {service}/{item} within {timeout} s") from None
        finally:
            self._answers.pop(post_id, None)

    # -- events --------------------------------------------------------------------

    async def _arrived(self) -> None:
        """Awaits until an event is waiting."""
        while not self._events:
            self._raise_if_failed()
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def next_batch(self) -> List[Event]:
        """Every event that has arrived, awaiting the first."""
        await self._arrived()
        batch = list(self._events)
        self._events.clear()
        self._resume_if_drained()
        return batch

    async def next(self) -> Event:
        """The next event."""
        await self._arrived()
        event = self._events.popleft()
        self._resume_if_drained()
        return event

    def _awaited(self) -> bool:
        """A snapshot or a post's answer is awaited: the socket must be read for it."""
        return bool(self._snapshots or self._answers)

    def _resume_if_drained(self) -> None:
        """Reads the socket again once the application took half of what waited, or
        awaits what only reading brings (a snapshot, a post's answer)."""
        if self._paused and (len(self._events) <= _MAX_WAITING // 2 or self._awaited()):
            self._paused = False
            if self._fd is not None and not self._closed:
                self._loop.add_reader(self._fd, self._read)
                self._loop.call_soon(self._read)

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        return await self.next()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closed:
            raise ConnectionError("the subscriber was closed")

    # -- lifetime ------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """Connected now (False while reconnecting)."""
        return self._native.connected

    def disconnect(self) -> None:
        """Closes the connection; awaiting anything of it afterwards raises."""
        if self._closed:
            return
        self._closed = True
        self._stop_watching()
        self._native.disconnect()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(ConnectionError("the subscriber was closed"))

    async def __aenter__(self) -> "Subscriber":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.disconnect()

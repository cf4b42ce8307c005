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
watch then), with the connection's lock released while the connect waits, so that a
slow or unreachable node never holds the loop nor the calls made on it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import warnings
import weakref
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Deque, Dict, List, Optional, TypeVar, Union

from . import _native
from ._native import Event, TickwireError  # noqa: F401 (tickwire.aio.TickwireError stays)
from .subscriber import Fields, Items, _check_timeout, _Images, _names, _view

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Unpack

    from ._native import ConnectArgs

T = TypeVar("T")

# While connected, the library's timers (a heartbeat to send, the node's silence to
# judge) run at its next deadline, which it says (`wait_hint`); while the connection is
# lost (no socket to watch), its reconnection is looked at this often.
_TIMERS_EVERY = 0.5
# The longest the timer waits, whatever the library's deadline.
_LONGEST = 30.0
# Events that may wait for the application; past it the socket is not read until the
# application has taken half of them, so that the node sees a slow consumer (and
# conflates or, past its bounds, disconnects it) instead of this process holding
# everything it sent.
_MAX_WAITING = 100_000


async def connect(address: str, **connect: Unpack[ConnectArgs]) -> "Subscriber":
    """Connects and logs in without blocking the event loop. ``connect`` takes
    ``tickwire.Subscriber``'s arguments (user, token, application, connect_timeout,
    reconnect, ca_file, dictionary), and fails as it does (``ConnectionError``,
    ``tickwire.LoginError``)."""
    loop = asyncio.get_running_loop()
    # Connect loads its files (a CA file, a dictionary): in the executor too.
    native = await loop.run_in_executor(None, lambda: _native.Subscriber(_native.Connect(address, **connect)))
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


def _weak_done(subscriber: "Subscriber") -> Callable[["asyncio.Future[List[Event]]"], None]:
    """A reconnection's done-callback that does not keep the subscriber."""
    ref = weakref.ref(subscriber)

    def done(future: "asyncio.Future[List[Event]]") -> None:
        target = ref()
        if target is not None:
            target._reconnected(future)

    return done


def _weak(obj: Any, method: str) -> Callable[[], None]:
    """A callback for the event loop that calls ``obj.method()`` while ``obj`` lives:
    the loop's handles do not keep a subscriber dropped without ``disconnect()``."""
    ref = weakref.ref(obj)

    def call() -> None:
        target = ref()
        if target is not None:
            getattr(target, method)()

    return call


class _LoopHandles:
    """What the event loop holds for a subscriber (its reader, its writer while output
    waits for the socket, and its timer), released when the subscriber is disconnected
    or collected."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.reader: Optional[int] = None
        self.writer: Optional[int] = None
        self.timer: Optional[asyncio.TimerHandle] = None

    def read(self, fd: Optional[int], callback: Callable[[], None]) -> None:
        if fd == self.reader:
            return
        if self.reader is not None:
            self.loop.remove_reader(self.reader)
            self.reader = None
        if fd is not None:
            self.loop.add_reader(fd, callback)
            self.reader = fd

    def write(self, fd: Optional[int], callback: Callable[[], None]) -> None:
        if fd == self.writer:
            return
        if self.writer is not None:
            self.loop.remove_writer(self.writer)
            self.writer = None
        if fd is not None:
            self.loop.add_writer(fd, callback)
            self.writer = fd

    def release(self) -> None:
        self.read(None, lambda: None)
        self.write(None, lambda: None)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


def _collected(handles: _LoopHandles, native: "_native.Subscriber") -> None:
    """A subscriber dropped without ``disconnect()``: its loop handles and connection."""
    warnings.warn("a tickwire.aio.Subscriber was not disconnected", ResourceWarning)
    loop = handles.loop
    if not loop.is_closed():
        # Collected on any thread; the loop's handles are released on its own.
        loop.call_soon_threadsafe(handles.release)
    # On a thread of its own: the executor may hold the connection's lock (briefly,
    # for a read), and the collecting thread may be the loop's.
    try:
        threading.Thread(target=native.disconnect, name="tickwire-aio-disconnect", daemon=True).start()
    except RuntimeError:  # the interpreter is shutting down: no new threads
        native.disconnect()


class Subscriber:
    """An asyncio subscriber (make one with ``await tickwire.aio.connect(...)``).

    ``subscribe``, ``close`` and ``services`` only send or read and return at once;
    ``snapshot``, ``post`` and iteration are awaited."""

    def __init__(self, native: "_native.Subscriber", loop: asyncio.AbstractEventLoop) -> None:
        self._native = native
        self._loop = loop
        self._events: Deque[Event] = collections.deque()
        # Every task awaiting an event: all are woken by the events, and failed.
        self._waiters: List["asyncio.Future[None]"] = []
        self._snapshots: Dict[int, _Snapshot] = {}
        self._answers: Dict[int, "asyncio.Future[Event]"] = {}
        self._error: Optional[BaseException] = None
        # The socket watched (None while reconnecting); read again after any call that
        # writes, which may find the connection lost (the library then closes it).
        self._fd: Optional[int] = None
        self._reconnecting = False
        self._closed = False
        self._paused = False
        self._handles = _LoopHandles(loop)
        self._on_readable = _weak(self, "_read")
        self._finalizer = weakref.finalize(self, _collected, self._handles, native)
        self._on_timer_due = _weak(self, "_on_timer")
        self._watch()

    # -- the loop's side -----------------------------------------------------------

    def _arm_timer(self, delay: float = _TIMERS_EVERY) -> None:
        """Runs the library's timers in ``delay`` seconds, or sooner if armed already
        for sooner."""
        when = self._loop.time() + delay
        timer = self._handles.timer
        if timer is not None:
            if timer.when() <= when:
                return
            timer.cancel()
        self._handles.timer = self._loop.call_at(when, self._on_timer_due)

    def _watch(self) -> None:
        """Watches the connection's socket as the library has it now (a reconnection
        makes a new one; a write that found the connection lost closed it), for
        writing too while output waits, and arms the timer for the library's next
        deadline."""
        self._fd = None if self._closed or self._error is not None else self._native.fileno()
        fd = None if self._paused else self._fd
        self._handles.read(fd, self._on_readable)
        until, write = None, False
        if self._fd is not None:
            try:
                until, write = self._native.wait_hint()
            except BaseException:  # gone for good: the next read says so
                pass
        # What the socket did not take is written by a read (next_events) once it is
        # writable.
        self._handles.write(fd if write else None, self._on_readable)
        if self._closed or self._error is not None:
            return
        if self._fd is None or until is None:
            self._arm_timer(_TIMERS_EVERY)
        else:
            self._arm_timer(min(max(until, 0.001), _LONGEST))

    def _read(self) -> None:
        """The socket is readable (or a timer is due): what arrived, without waiting."""
        if self._closed or self._error is not None:
            return
        if len(self._events) >= _MAX_WAITING and not self._awaited():
            # The application is behind: the socket waits until it takes events (or
            # awaits a snapshot or a post's answer, which only reading can bring).
            self._paused = True
            self._handles.read(None, self._on_readable)
            self._handles.write(None, self._on_readable)
            return
        if self._fd is None:
            return  # lost: the timer reconnects, in the executor
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
        if self._events:
            for waiter in self._waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def _on_timer(self) -> None:
        self._handles.timer = None
        if self._closed or self._error is not None:
            return
        # While the executor reconnects it holds the library: nothing is waited for.
        if not self._reconnecting:
            self._watch()
            if self._fd is not None:
                self._read()
            else:
                # No socket: the library reconnects, which blocks; in the executor.
                self._reconnecting = True
                future = self._loop.run_in_executor(None, self._native.next_events, 0)
                future.add_done_callback(_weak_done(self))
        if not self._closed and self._error is None and self._handles.timer is None:
            self._arm_timer()

    def _reconnected(self, future: "asyncio.Future[List[Event]]") -> None:
        self._reconnecting = False
        if self._closed or self._error is not None:
            return
        if future.exception() is not None:
            self._fail(future.exception())
            return
        self._take(future.result())
        self._watch()

    def _fail(self, error: BaseException) -> None:
        """Ends every wait with ``error``: the connection is gone for good (the error
        is raised again by every later call), or closed."""
        if self._error is None:
            self._error = error
        waiting = [*self._waiters, *self._answers.values(), *(s.done for s in self._snapshots.values())]
        for future in waiting:
            if not future.done():
                future.set_exception(error)
        self._answers.clear()
        self._snapshots.clear()
        self._fd = None
        self._handles.release()

    # -- streams -------------------------------------------------------------------

    def _writing(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A call that writes to the node: it may find the connection lost, after
        which the socket watched is no longer the library's."""
        self._raise_if_failed()
        try:
            return call(*args, **kwargs)
        finally:
            if not self._closed:
                self._watch()

    def subscribe(self, service: str, items: Items, *, view: Optional[Fields] = None) -> List[int]:
        """Opens a stream per item (a refresh, then updates); their stream ids."""
        return self._writing(self._native.subscribe, service, _names(items), view=_view(view))

    def close(self, service: str, items: Items) -> None:
        """Closes the items' streams (``KeyError`` for one that is not open)."""
        self._writing(self._native.close, service, _names(items))

    def change_view(self, service: str, items: Items, *, view: Optional[Fields] = None) -> None:
        """Changes the view of the items' open streams where they stand (``None``: every
        field), with no new image: the updates from now on carry the new view
        (``KeyError`` for an item that is not open)."""
        self._writing(self._native.change_view, service, _names(items), view=_view(view))

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
        _check_timeout(timeout)
        names = _names(items)
        sids = self._writing(self._native.subscribe, service, names, view=_view(view), snapshot=True)
        snapshot = _Snapshot(service, dict(zip(sids, names)))
        for sid in sids:
            self._snapshots[sid] = snapshot
        self._resume_if_drained()
        done = False
        try:
            try:
                await asyncio.wait_for(asyncio.shield(snapshot.done), timeout)
            except asyncio.TimeoutError:
                raise snapshot.timed_out(timeout) from None
            done = True
        finally:
            for sid in sids:
                self._snapshots.pop(sid, None)
            # Given up (its timeout, a cancellation): its streams are closed (see
            # tickwire.Subscriber.snapshot).
            if not done and snapshot.waiting and not self._closed and self._error is None:
                with contextlib.suppress(ConnectionError):
                    self._writing(self._native.close_ids, list(snapshot.waiting))
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
        _check_timeout(timeout)
        post_id = self._writing(self._native.send_post, service, item, dict(fields), ack=ack)
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
            waiter: "asyncio.Future[None]" = self._loop.create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                self._waiters.remove(waiter)

    async def next_batch(self) -> List[Event]:
        """Every event that has arrived, awaiting the first."""
        await self._arrived()
        # Taken once reading is resumed: an error there loses none of them.
        self._resume_if_drained(waiting=0)
        batch = list(self._events)
        self._events.clear()
        return batch

    async def next(self) -> Event:
        """The next event."""
        await self._arrived()
        self._resume_if_drained(waiting=len(self._events) - 1)
        return self._events.popleft()

    def _awaited(self) -> bool:
        """A snapshot or a post's answer is awaited: the socket must be read for it."""
        return bool(self._snapshots or self._answers)

    def _resume_if_drained(self, waiting: Optional[int] = None) -> None:
        """Reads the socket again once the application took half of what waited
        (``waiting`` events are left), or awaits what only reading brings (a snapshot,
        a post's answer)."""
        left = len(self._events) if waiting is None else waiting
        if self._paused and (left <= _MAX_WAITING // 2 or self._awaited()):
            self._paused = False
            if not self._closed and self._error is None:
                self._watch()
                self._loop.call_soon(self._on_readable)

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        return await self.next()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            # The same error each time, its traceback from this raise only: raised
            # again as it is, it would gather every earlier raise's frames.
            raise self._error.with_traceback(None)
        if self._closed:
            raise ConnectionError("the subscriber was closed")

    # -- lifetime ------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """Connected now (False while reconnecting)."""
        return self._native.connected

    def disconnect(self) -> None:
        """Closes the connection; what is awaited of it (events, snapshots, posts'
        answers) and anything awaited afterwards raises ``ConnectionError``."""
        if self._closed:
            return
        self._closed = True
        self._finalizer.detach()
        self._fail(ConnectionError("the subscriber was closed"))
        self._native.disconnect()

    async def __aenter__(self) -> "Subscriber":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.disconnect()

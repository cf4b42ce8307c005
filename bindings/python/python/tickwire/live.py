"""A live last-value view: items kept current by a thread of their own, read like a
dict (``view["SYM1"]["BID"]``), each with its data state.

    view = tickwire.LiveView("127.0.0.1:14002", "FEED", ["SYM1", "SYM2"], fields=["BID", "ASK"])
    view.wait_ready()
    print(view["SYM1"]["BID"], view.state("SYM1"))     # 101.25 ok
    print(view.frame())                                # a pandas DataFrame, one row per item

The view has a connection of its own; its thread applies every refresh, update and
status as it arrives, so a read is a copy of the latest values, never a wait.
"""

from __future__ import annotations

import threading
import time
import warnings
import weakref
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional, Sequence, Union

from . import _native
from ._native import Event
from .subscriber import Items, _names, _view

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Unpack

    from ._native import ConnectArgs

# How long close() waits for the thread, which its disconnect() wakes at once (a thread
# still connecting then is left to end by itself).
_CLOSE_WAIT = 1.0


def _run(ref: "weakref.ReferenceType[LiveView]", native: "_native.Subscriber", stop: threading.Event) -> None:
    """The view's thread: applies what arrives while the view is used."""
    try:
        while not stop.is_set():
            # Waits until events come: close() (or the view collected) disconnects,
            # which ends the wait with ConnectionError.
            events = native.next_events(None)
            view = ref()
            if view is None:
                return
            if events:
                view._take(events)
            del view
    except BaseException as e:  # the connection is gone for good
        view = ref()
        if view is not None and not stop.is_set():
            view._failed(e)


def _collected(native: "_native.Subscriber", stop: threading.Event) -> None:
    """A view dropped without close(): its thread stops and its connection closes."""
    warnings.warn("a tickwire.LiveView was not closed", ResourceWarning)
    stop.set()
    native.disconnect()


class LiveView(Mapping[str, Dict[str, Any]]):
    """The latest values of ``items`` of ``service``, kept current in the background.

    ``view[item]`` is a copy of the item's fields ({name: value}); ``state(item)`` is
    "pending" (no image yet), "ok", "suspect" (the values may be stale: the publisher
    or the connection is lost, and it is being recovered) or "closed" (the node ended
    the stream; ``text(item)`` says why). ``fields`` limits the items to those fields
    (a view). Connection arguments are ``tickwire.Subscriber``'s; the address may list
    several nodes for failover."""

    def __init__(
        self,
        address: str,
        service: str,
        items: Items,
        *,
        fields: Optional[Sequence[Union[str, int]]] = None,
        **connect: Unpack[ConnectArgs],
    ) -> None:
        self._service = service
        self._names = _names(items)
        self._native = _native.Subscriber(_native.Connect(address, **connect))
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._images: Dict[str, Dict[str, Any]] = {name: {} for name in self._names}
        self._states: Dict[str, str] = {name: "pending" for name in self._names}
        self._texts: Dict[str, Optional[str]] = {name: None for name in self._names}
        # Items whose refresh came in parts and is not complete yet.
        self._partial: Dict[str, bool] = {}
        self._error: Optional[BaseException] = None
        self._stop = threading.Event()
        self._native.subscribe(service, self._names, view=_view(fields))
        # The thread holds the view weakly: a view dropped without close() is
        # collected, which stops the thread and closes the connection.
        self._thread = threading.Thread(
            target=_run, args=(weakref.ref(self), self._native, self._stop), name=f"tickwire-live-{service}", daemon=True
        )
        self._finalizer = weakref.finalize(self, _collected, self._native, self._stop)
        self._thread.start()

    # -- the view's thread ---------------------------------------------------------

    def _take(self, events: List[Event]) -> None:
        with self._changed:
            for event in events:
                self._apply(event)
            self._changed.notify_all()

    def _failed(self, error: BaseException) -> None:
        with self._changed:
            self._error = error
            self._changed.notify_all()

    def _apply(self, event: Event) -> None:
        name = event.item
        if event.service != self._service or name not in self._images:
            return
        if event.type == "refresh":
            # A new image (after a recovery, say) replaces the old one, not merged.
            if not self._partial.get(name):
                self._images[name] = {}
            self._images[name].update(event.fields)
            self._partial[name] = not event.complete
            self._set_state(name, event)
        elif event.type == "update":
            self._images[name].update(event.fields)
        elif event.type == "status":
            self._set_state(name, event)

    def _set_state(self, name: str, event: Event) -> None:
        if event.stream_state not in (None, "open"):
            self._states[name] = "closed"
        elif event.data_state == "suspect":
            self._states[name] = "suspect"
        elif event.type == "refresh" and not self._partial.get(name):
            self._states[name] = "ok"
        self._texts[name] = event.text

    # -- reading -------------------------------------------------------------------

    def __getitem__(self, item: str) -> Dict[str, Any]:
        with self._lock:
            return dict(self._images[item])

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def state(self, item: str) -> str:
        """"pending", "ok", "suspect" or "closed"."""
        with self._lock:
            return self._states[item]

    def text(self, item: str) -> Optional[str]:
        """The node's last text for the item (why it is suspect or closed)."""
        with self._lock:
            return self._texts[item]

    def states(self) -> Dict[str, str]:
        with self._lock:
            return dict(self._states)

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Waits until every item has its image or was closed by the node;
        ``TimeoutError`` naming those still pending after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                if self._error is not None:
                    # Its traceback from this raise only (see aio's `_raise_if_failed`).
                    raise self._error.with_traceback(None)
                pending = [n for n, s in self._states.items() if s == "pending"]
                if not pending:
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no image of {pending} from {self._service} within {timeout} s")
                self._changed.wait(left)

    def frame(self) -> "pandas.DataFrame":  # noqa: F821
        """The latest values as a pandas DataFrame: one row per item (its name the
        index), one column per field, and a ``state`` column."""
        try:
            import pandas
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("frame() needs pandas: pip install pandas") from e
        with self._lock:
            rows = {n: {**self._images[n], "state": self._states[n]} for n in self._names}
        return pandas.DataFrame.from_dict(rows, orient="index")

    @property
    def error(self) -> Optional[BaseException]:
        """Why the view stopped, if its connection is gone for good."""
        return self._error

    # -- lifetime ------------------------------------------------------------------

    def close(self) -> None:
        """Stops the thread and closes the connection. A thread in the middle of a
        reconnect (its connect may take ``connect_timeout`` for each node) is not waited
        for: it ends by itself once its connect returns, finding the connection closed."""
        self._finalizer.detach()
        self._stop.set()
        # Closed first: a thread waiting for events then ends within its next look.
        self._native.disconnect()
        self._thread.join(timeout=_CLOSE_WAIT)

    def __enter__(self) -> "LiveView":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LiveView({self._service}, {len(self._names)} items, {self.states()})"

"""Tickwire for Python: subscribe to a node's items, take snapshots, and publish.

The protocol, reconnection and watchlist are the Rust client library's (the
``tickwire._native`` extension); this package adds iteration, asyncio, snapshots and
DataFrames on top.

    import tickwire
    s = tickwire.Subscriber("127.0.0.1:14002")
    s.subscribe("FEED", ["SYM1", "SYM2"])
    for event in s:
        print(event.type, event.item, event.fields)

``tickwire.aio`` is the asyncio API: ``await tickwire.aio.connect(...)``, then
``await s.snapshot(...)``, ``await s.post(...)``, ``async for event in s``.
"""

from ._native import Event, LoginError, TickwireError, field_names
from .live import LiveView
from .publisher import Publisher
from .subscriber import Subscriber

__all__ = [
    "Event",
    "LiveView",
    "LoginError",
    "Publisher",
    "Subscriber",
    "TickwireError",
    "field_names",
]

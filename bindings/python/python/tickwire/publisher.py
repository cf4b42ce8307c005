"""The Python Publisher: the native one (a thread of its own answers the node) with
context-manager support and documentation."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Mapping, Union

from . import _native

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Unpack

    from ._native import ConnectArgs

FieldValues = Mapping[Union[str, int], Any]


class Publisher:
    """Publishes the items of one service to a node.

    Field values follow the dictionary's type of each field: ``float`` (or ``int``,
    ``decimal.Decimal``, ``str``) for REAL, ``int`` for INT/UINT/ENUM (a ``datetime``
    is taken as nanoseconds since the epoch, as TIM_TRK_1 carries it),
    ``datetime.date`` for DATE, ``datetime.time`` (or an aware ``datetime``, in UTC)
    for TIME, a ``datetime`` (aware ones in UTC) for DATETIME, ``bytes`` (or base64
    text) for BUFFER, ``str`` for ASCII/UTF8, ``None`` for a blank. A value that does not fit
    raises ``ValueError`` naming the field; an unknown field ``KeyError``.

    With ``start_down`` the service is announced down until ``set_service_up(True)``,
    so subscribers wait for the first images instead of being told an item is not
    found. With ``reconnect`` (the default) a lost connection is re-established and
    every image sent again. Connection arguments are ``tickwire.Subscriber``'s.
    """

    def __init__(
        self, address: str, service: str, *, start_down: bool = False, **connect: Unpack[ConnectArgs]
    ) -> None:
        self.service = service
        self._native = _native.Publisher(_native.Connect(address, **connect), service, start_down=start_down)

    def refresh(self, item: str, fields: FieldValues) -> None:
        """Sets the item's whole image and sends it to the node."""
        self._native.refresh(item, dict(fields))

    def update(
        self,
        item: str,
        fields: FieldValues,
        *,
        update_type: str = "other",
        do_not_conflate: bool = False,
    ) -> None:
        """Sends the changed fields of an item that has had a refresh; the node merges
        them into its image. ``update_type`` is "quote", "trade" or "other"."""
        self._native.update(item, dict(fields), update_type=update_type, do_not_conflate=do_not_conflate)

    def set_service_up(self, up: bool = True) -> None:
        """Announces the service up (or down)."""
        self._native.set_service_up(up)

    def flush(self, timeout: float = 5.0) -> None:
        """Waits until everything published is written (``TimeoutError`` after
        ``timeout`` seconds)."""
        self._native.flush(timeout)

    @property
    def connected(self) -> bool:
        return self._native.connected

    @property
    def updates_sent(self) -> int:
        return self._native.updates_sent

    @property
    def items(self) -> List[str]:
        """The names of the items published."""
        return self._native.items

    def close(self, timeout: float = 5.0) -> None:
        """Writes what is queued and disconnects; the node marks the service's items
        suspect (its publisher is gone)."""
        self._native.close(timeout)

    def __enter__(self) -> "Publisher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

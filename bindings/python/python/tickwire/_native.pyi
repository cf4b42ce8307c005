"""Type hints of the native extension (src/*.rs)."""

from typing import Any, Dict, List, Optional, Tuple, Union

from typing_extensions import TypedDict, Unpack

class TickwireError(Exception): ...
class LoginError(TickwireError): ...

class Event:
    """A refresh, update, status or ack of one item stream."""

    type: str
    """"refresh", "update", "status" or "ack"."""
    service: str
    item: str
    stream: int
    fields: Dict[Union[str, int], Any]
    seq: Optional[int]
    complete: Optional[bool]
    update_type: Optional[str]
    stream_state: Optional[str]
    data_state: Optional[str]
    code: Optional[int]
    text: Optional[str]
    post_id: Optional[int]
    accepted: Optional[bool]
    nak: Optional[str]
    def __reduce__(self) -> Tuple[Any, Tuple[Dict[str, Any]]]:
        """Pickled as its attributes."""

class ConnectArgs(TypedDict, total=False):
    """``Connect``'s keyword arguments, which the classes that connect pass on (for type
    checkers: there is no such class at run time)."""

    user: Optional[str]
    token: Optional[str]
    application: Optional[str]
    connect_timeout: float
    reconnect: bool
    ca_file: Optional[str]
    dictionary: Optional[str]

class Connect:
    """Connection arguments, parsed; checked and loaded by the class that connects."""

    def __init__(self, address: str, **connect: Unpack[ConnectArgs]) -> None: ...

class Subscriber:
    def __init__(self, connect: Connect) -> None: ...
    def subscribe(
        self,
        service: str,
        items: List[str],
        *,
        view: Optional[List[Union[str, int]]] = ...,
        snapshot: bool = ...,
    ) -> List[int]: ...
    def close(self, service: str, items: List[str]) -> None: ...
    def close_ids(self, sids: List[int]) -> None: ...
    def change_view(
        self, service: str, items: List[str], *, view: Optional[List[Union[str, int]]] = ...
    ) -> None: ...
    def next_events(self, timeout: Optional[float] = ...) -> List[Event]: ...
    def send_post(
        self,
        service: str,
        item: str,
        fields: Dict[Union[str, int], Any],
        *,
        ack: bool = ...,
    ) -> int: ...
    def answer(self, post_id: int, timeout: float = ...) -> Event: ...
    def fileno(self) -> Optional[int]: ...
    def wait_hint(self) -> Tuple[Optional[float], bool]: ...
    def services(self) -> Dict[str, str]: ...
    @property
    def connected(self) -> bool: ...
    @property
    def reconnects(self) -> int: ...
    def disconnect(self) -> None: ...

class Publisher:
    def __init__(self, connect: Connect, service: str, *, start_down: bool = ...) -> None: ...
    def refresh(self, item: str, fields: Dict[Union[str, int], Any]) -> None: ...
    def update(
        self,
        item: str,
        fields: Dict[Union[str, int], Any],
        *,
        update_type: str = ...,
        do_not_conflate: bool = ...,
    ) -> None: ...
    def set_service_up(self, up: bool) -> None: ...
    def flush(self, timeout: float = ...) -> None: ...
    @property
    def connected(self) -> bool: ...
    @property
    def updates_sent(self) -> int: ...
    @property
    def items(self) -> List[str]: ...
    def close(self, timeout: float = ...) -> None: ...

def field_names() -> Dict[int, str]: ...
def _event(state: Dict[str, Any]) -> Event:
    """An event from its pickled attributes."""

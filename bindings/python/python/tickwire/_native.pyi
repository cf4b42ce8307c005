"""Type hints of the native extension (src/*.rs)."""

from typing import Any, Dict, List, Optional, Tuple, Union

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

class Subscriber:
    def __init__(
        self,
        address: str,
        *,
        user: Optional[str] = ...,
        token: Optional[str] = ...,
        application: Optional[str] = ...,
        connect_timeout: float = ...,
        reconnect: bool = ...,
        ca_file: Optional[str] = ...,
        dictionary: Optional[str] = ...,
    ) -> None: ...
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
    def post(
        self,
        service: str,
        item: str,
        fields: Dict[Union[str, int], Any],
        *,
        ack: bool = ...,
        timeout: float = ...,
    ) -> Optional[Event]: ...
    def send_post(
        self,
        service: str,
        item: str,
        fields: Dict[Union[str, int], Any],
        *,
        ack: bool = ...,
    ) -> int: ...
    def fileno(self) -> Optional[int]: ...
    def services(self) -> Dict[str, str]: ...
    @property
    def connected(self) -> bool: ...
    @property
    def reconnects(self) -> int: ...
    def disconnect(self) -> None: ...

class Publisher:
    def __init__(
        self,
        address: str,
        service: str,
        *,
        user: Optional[str] = ...,
        token: Optional[str] = ...,
        application: Optional[str] = ...,
        connect_timeout: float = ...,
        reconnect: bool = ...,
        ca_file: Optional[str] = ...,
        dictionary: Optional[str] = ...,
        start_down: bool = ...,
    ) -> None: ...
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

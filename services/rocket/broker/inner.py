""":class:`MessageInner`: a message on its way into the store (``MessageExtBrokerInner``).

The send path, send-back and delayed delivery all build one and hand it to
:meth:`rocket.broker.controller.BrokerController.put_message`, which applies
the delay rewrite and turns it into a store :class:`PutMessageRequest`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rocket.message import (
    MAX_PROPERTIES_SIZE,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    encode_properties,
    tags_hash_code,
)
from rocket.store.api import PutMessageRequest

_TAGS_CODES: dict[str, int] = {}


def cached_tags_code(tags: str | None) -> int:
    """:func:`tags_hash_code`, memoised (tags repeat; the Java hash is slow in Python)."""
    if not tags:
        return 0
    code = _TAGS_CODES.get(tags)
    if code is None:
        if len(_TAGS_CODES) >= 4096:
            _TAGS_CODES.clear()
        code = _TAGS_CODES[tags] = tags_hash_code(tags)
    return code


@dataclass(slots=True, init=False)
class MessageInner:
    """A message to store: target, body as sent (maybe compressed), flags, properties.

    ``tags_code`` overrides the ConsumeQueue tag code (delayed messages store
    their delivery time there); by default it is the hash of ``TAGS``.
    ``encoded`` is the encoded ``properties`` when the caller has it already
    (it must match them; leave it None when they may still change).
    """

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = "127.0.0.1:0"
    reconsume_times: int = 0
    tags_code: int | None = None
    encoded: str | None = None

    def __init__(self, topic: str, queue_id: int, body: bytes, properties: dict[str, str] | None = None,
                 flag: int = 0, sys_flag: int = 0, born_timestamp: int = 0, born_host: str = "127.0.0.1:0",
                 reconsume_times: int = 0, tags_code: int | None = None, encoded: str | None = None) -> None:
        # Written out (``init=False``): compiled, this is native code; the ``__init__`` that
        # ``dataclass`` generates stays interpreted even in a mypyc build (one per send).
        self.topic = topic
        self.queue_id = queue_id
        self.body = body
        self.properties = {} if properties is None else properties
        self.flag = flag
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.reconsume_times = reconsume_times
        self.tags_code = tags_code
        self.encoded = encoded

    @property
    def delay_level(self) -> int:
        """The ``DELAY`` property as an int (0 when absent or not a number)."""
        try:
            return int(self.properties.get(PROPERTY_DELAY_TIME_LEVEL, "0") or 0)
        except ValueError:
            return 0

    def encoded_properties(self) -> str:
        """The properties string as it will be stored (Java form)."""
        if self.encoded is not None:
            return self.encoded
        return encode_properties(self.properties)

    def properties_size(self) -> int:
        """Bytes of the encoded properties string."""
        return len(self.encoded_properties().encode())

    def properties_too_long(self) -> bool:
        """True when the properties exceed 32767 bytes (MESSAGE_ILLEGAL)."""
        return self.properties_size() > MAX_PROPERTIES_SIZE

    def to_request(self) -> PutMessageRequest:
        """The store request for this message."""
        get = self.properties.get
        keys = get(PROPERTY_KEYS)
        wait = get(PROPERTY_WAIT_STORE_MSG_OK)
        return PutMessageRequest(  # positional: topic .. wait_store_msg_ok (one per message, keep it cheap)
            self.topic,
            self.queue_id,
            self.body,
            self.encoded if self.encoded is not None else encode_properties(self.properties),
            self.flag,
            self.sys_flag,
            self.born_timestamp,
            self.born_host,
            self.reconsume_times,
            0,
            self.tags_code if self.tags_code is not None else cached_tags_code(get(PROPERTY_TAGS)),
            [k for k in keys.split(" ") if k] if keys else [],
            get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or None,
            wait is None or wait.lower() != "false",
        )

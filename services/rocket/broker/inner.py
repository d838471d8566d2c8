""":class:`MessageInner`: a message on its way into the store (``MessageExtBrokerInner``).

The send path, send-back and delayed delivery all build one and hand it to
:meth:`rocket.broker.controller.BrokerController.put_message`, which applies
the delay rewrite and turns it into a store :class:`PutMessageRequest`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

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


#: A batch item's stored form (worked out by ``rocket.broker.processor.send``): ``(before, after,
#: room, tags code, KEYS list, UNIQ_KEY, wait)``: an item whose properties have this form is stored
#: as ``before + its UNIQ_KEY value + after`` when that value has at most ``room`` bytes; one
#: without a UNIQ_KEY value of its own as ``before`` with UNIQ_KEY ``UNIQ_KEY`` (the batch's, if any).
#: Tags code, keys and wait are its merged properties'.
ItemForm = tuple[bytes, bytes, int, int, list[str], str | None, bool]
_UNIQ_PIECE: Final = b"UNIQ_KEY\x01"


def apply_item_forms(
    raw_props: list[bytes], start: int, forms: dict[bytes, ItemForm | None],
    form_of: Callable[[bytes, int], ItemForm | None], props: list[bytes], tags_codes: list[int],
    keys: list[list[str]], uniq_keys: list[str | None],
) -> tuple[int, bool, bool]:
    """Append the stored properties, tags code, keys and UNIQ_KEY of batch items ``start``, ...
    (their properties strings ``raw_props``) to the four lists, by their forms.

    An item's form is keyed by its properties with the UNIQ_KEY value cut out (the first
    ``UNIQ_KEY`` piece); ``forms`` caches them, ``form_of(rest, cut)`` works a missing one out
    (``cut``: where the value was, -1 for none; None: no form). Stops at the first item without
    a form or whose UNIQ_KEY value does not fit. Returns ``(index of that item, or
    len(raw_props), some item waits for the store, some item has KEYS or a UNIQ_KEY)``.
    """
    wait = False
    indexed = False
    uniq_piece = _UNIQ_PIECE
    n = len(raw_props)
    index = start
    # The previous item's properties around its UNIQ_KEY value, and its form: an item that starts
    # and ends the same, with no separator in between, has that form too (same cut, same rest).
    head = b""
    tail = b""
    last: ItemForm | None = None
    while index < n:
        raw = raw_props[index]
        value: bytes | None = None
        form: ItemForm | None = None
        if last is not None and raw.startswith(head) and raw.endswith(tail) and len(raw) >= len(head) + len(tail):
            value = raw[len(head):len(raw) - len(tail)]
            # the separator as an int: ``bytes in bytes`` on CPython 3.11 first tries the needle
            # as an int and raises (then clears) a TypeError, ~2,000 instructions per item
            if 2 not in value:
                form = last
        if form is None:
            value = None
            rest = raw
            cut = -1
            i = raw.find(uniq_piece)
            if i >= 0 and (i == 0 or raw[i - 1] == 2):
                j = i + len(uniq_piece)
                k = raw.find(b"\x02", j)
                head = raw[:j]
                if k < 0:
                    value = raw[j:]
                    tail = b""
                else:
                    value = raw[j:k]
                    tail = raw[k:]
                rest = head + tail
                cut = j
            if rest in forms:
                form = forms[rest]
            else:
                form = forms[rest] = form_of(rest, cut)
            last = form if cut >= 0 else None
            if form is None:
                break
        before, after, room, tags_code, item_keys, uniq, item_wait = form
        if value is None:
            props.append(before)
        else:
            if len(value) > room:
                break
            props.append(before + value + after)
            uniq = value.decode() or None
        tags_codes.append(tags_code)
        keys.append(item_keys)
        uniq_keys.append(uniq)
        if item_wait:
            wait = True
        if uniq is not None or item_keys:
            indexed = True
        index += 1
    return index, wait, indexed

"""The RocketMQ 4.x remoting protocol: frame codec, server and client.

The codes live in :mod:`rocket.protocol.codes`; they are re-exported here because every request
handler needs them beside :class:`RemotingCommand`.

Formats follow RocketMQ's ``remoting`` module: ``RemotingCommand``, ``NettyRemotingAbstract``.
"""

from rocket.protocol.codes import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    PERM_INHERIT,
    PERM_PRIORITY,
    PERM_READ,
    PERM_WRITE,
    LanguageCode,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from rocket.remoting.client import RemotingClient
from rocket.remoting.command import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameDecoder,
    FrameError,
    HeaderFieldError,
    RemotingCommand,
    RemotingCommandError,
    RemotingConnectError,
    RemotingError,
    RemotingTimeoutError,
    decode,
    encode,
)
from rocket.remoting.connection import FlowControl, Processors, RemotingConnection, parse_addr
from rocket.remoting.server import RemotingServer

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "PERM_INHERIT",
    "PERM_PRIORITY",
    "PERM_READ",
    "PERM_WRITE",
    "FlowControl",
    "FrameDecoder",
    "FrameError",
    "HeaderFieldError",
    "LanguageCode",
    "Processors",
    "RemotingClient",
    "RemotingCommand",
    "RemotingCommandError",
    "RemotingConnectError",
    "RemotingConnection",
    "RemotingError",
    "RemotingServer",
    "RemotingTimeoutError",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
    "decode",
    "encode",
    "parse_addr",
]

"""Exceptions raised by the client.

Server answers with an unexpected response code surface as
:class:`rocket.remoting.RemotingCommandError` (attributes ``code`` and
``remark``); network failures as :class:`rocket.remoting.RemotingConnectError`
and :class:`rocket.remoting.RemotingTimeoutError`. The classes here cover what
the client itself decides.
"""

from __future__ import annotations


class MQClientError(Exception):
    """Base class of client-side failures."""


class NotStartedError(MQClientError):
    """A producer or consumer was used before ``start()`` or after ``shutdown()``."""


class TopicRouteError(MQClientError):
    """No NameServer knows the topic (and, for producers, no ``TBW102`` template exists)."""

    def __init__(self, topic: str, detail: str = "") -> None:
        self.topic = topic
        super().__init__(f"no route for topic {topic!r}" + (f": {detail}" if detail else ""))


class NameServerUnavailableError(MQClientError):
    """No configured NameServer answered."""


class SendFailedError(MQClientError):
    """Every attempt of a send failed; ``attempts`` lists ``(broker_name, error)`` per try.

    The last error is also the exception's ``__cause__``.
    """

    def __init__(self, topic: str, attempts: list[tuple[str, BaseException]]) -> None:
        self.topic = topic
        self.attempts = attempts
        tried = ", ".join(f"{broker}: {type(err).__name__}: {err}" for broker, err in attempts)
        super().__init__(f"send to {topic!r} failed after {len(attempts)} attempt(s) ({tried})")

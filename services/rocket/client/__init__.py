"""The RocketCluster client: :class:`Producer`, :class:`PullConsumer`,
:class:`PushConsumer`, :class:`TransactionProducer` and :class:`Admin` (asyncio).

It speaks the RocketMQ 4.x remoting protocol, so it also works against
Apache RocketMQ NameServers and brokers. Quick start::

    from rocket.client import Producer, PushConsumer, ConsumeStatus, build_message

    async with Producer("PID_DEMO", "127.0.0.1:9876") as producer:
        result = await producer.send(build_message("Demo", b"hello", tags="TagA"))

    async def handle(msgs):
        for msg in msgs:
            print(msg.msg_id, msg.body)
        return ConsumeStatus.SUCCESS

    consumer = PushConsumer("CID_DEMO", "127.0.0.1:9876", handle)
    consumer.subscribe("Demo", "TagA")
    await consumer.start()
"""

from rocket.client.admin import Admin, BrokerInfo, GroupLag, QueueLag
from rocket.client.base import MQClient
from rocket.client.consumer import (
    ConsumeStatus,
    MessageHandler,
    PullConsumer,
    PullResult,
    PullStatus,
    PushConsumer,
)
from rocket.client.errors import (
    MQClientError,
    NameServerUnavailableError,
    NotStartedError,
    SendFailedError,
    TopicRouteError,
)
from rocket.client.producer import Producer, SendResult, SendStatus, build_message, build_timer_delete
from rocket.client.subscription import ConsumeFrom, MessageModel
from rocket.client.transaction import LocalTransactionState, TransactionProducer, TransactionSendResult
from rocket.message import Message, MessageExt
from rocket.protocol import ClusterInfo, MessageQueue, TopicRouteData

__all__ = [
    "Admin",
    "BrokerInfo",
    "ClusterInfo",
    "ConsumeFrom",
    "ConsumeStatus",
    "GroupLag",
    "LocalTransactionState",
    "MQClient",
    "MQClientError",
    "Message",
    "MessageExt",
    "MessageHandler",
    "MessageModel",
    "MessageQueue",
    "NameServerUnavailableError",
    "NotStartedError",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "QueueLag",
    "SendFailedError",
    "SendResult",
    "SendStatus",
    "TopicRouteData",
    "TopicRouteError",
    "TransactionProducer",
    "TransactionSendResult",
    "build_message",
    "build_timer_delete",
]

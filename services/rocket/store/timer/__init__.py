"""Arbitrary-time delayed messages (RocketMQ 5 ``store/timer``, RIP-43): the TimerLog, the timer
wheel, the timer checkpoint and :class:`TimerMessageStore`, which enqueues messages stored to
``rmq_sys_wheel_timer`` into the wheel and delivers them to their real topic when due."""

from rocket.store.timer.checkpoint import TimerCheckpoint
from rocket.store.timer.log import UNIT_SIZE, TimerLog
from rocket.store.timer.timer_message_store import (
    PROPERTY_START_DELIVER_TIME,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_ENQUEUE_MS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_TIMER_ROLL_TIMES,
    TIMER_TOPIC,
    TimerMessageStore,
    TimerStats,
    build_delete_key,
)
from rocket.store.timer.wheel import Slot, TimerWheel

__all__ = [
    "PROPERTY_START_DELIVER_TIME",
    "PROPERTY_TIMER_DELAY_MS",
    "PROPERTY_TIMER_DELAY_SEC",
    "PROPERTY_TIMER_DELIVER_MS",
    "PROPERTY_TIMER_DEL_UNIQKEY",
    "PROPERTY_TIMER_DEQUEUE_MS",
    "PROPERTY_TIMER_ENQUEUE_MS",
    "PROPERTY_TIMER_OUT_MS",
    "PROPERTY_TIMER_ROLL_TIMES",
    "TIMER_TOPIC",
    "UNIT_SIZE",
    "Slot",
    "TimerCheckpoint",
    "TimerLog",
    "TimerMessageStore",
    "TimerStats",
    "TimerWheel",
    "build_delete_key",
]

"""The broker side of timer messages: the send hook :func:`transform_timer_message` (RocketMQ 5
``HookUtils.checkIfTimerMessage`` / ``transformTimerMessage``) and the Prometheus collector
:class:`TimerCollector`.

A message is a timer message when it carries ``TIMER_DELIVER_MS`` (absolute, ms),
``TIMER_DELAY_SEC`` or ``TIMER_DELAY_MS`` (relative to its arrival), or ``__STARTDELIVERTIME``
(absolute, ms, as Alibaba Cloud's clients set it; an extension: Apache ignores it), no
``DELAY`` level (a level wins and the timer properties are dropped, as Apache), no
``TIMER_OUT_MS`` yet, and is not already addressed to ``rmq_sys_wheel_timer``. Then:

==================================================  ==========================================
delivery time                                       outcome
==================================================  ==========================================
not a number                                        WHEEL_TIMER_MSG_ILLEGAL: code 13
more than ``timerMaxDelaySec`` ahead                WHEEL_TIMER_MSG_ILLEGAL: code 13, Apache's
                                                    remark ``timer message illegal, the delay
                                                    time should not be bigger than the max
                                                    delay %dms; ...``
in the future                                       stored to rmq_sys_wheel_timer queue 0 with
                                                    ``TIMER_OUT_MS`` (the time floored to
                                                    ``timerPrecisionMs``, one slot earlier when
                                                    exact), ``REAL_TOPIC``, ``REAL_QID``
now or past, with ``TIMER_DEL_UNIQKEY``             WHEEL_TIMER_MSG_ILLEGAL: code 13
now or past                                         stored to its topic at once
``timerWheelEnable`` false                          WHEEL_TIMER_NOT_ENABLE: code 1
==================================================  ==========================================
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from rocket.message import PROPERTY_DELAY_TIME_LEVEL, PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC
from rocket.store.api import PutMessageResult, PutMessageStatus
from rocket.store.timer import (
    PROPERTY_START_DELIVER_TIME,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_OUT_MS,
    TIMER_TOPIC,
)
from rocket.store.timer.timer_message_store import LAG_BUCKETS

if TYPE_CHECKING:
    from rocket.broker.inner import MessageInner
    from rocket.store.api import MessageStoreConfig
    from rocket.store.timer import TimerMessageStore

#: The properties that make a message a timer message (``HookUtils.checkIfTimerMessage``, plus
#: ``__STARTDELIVERTIME``).
TIMER_PROPERTY_KEYS = _TIMER_KEYS = (PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_MS, PROPERTY_TIMER_DELAY_SEC,
               PROPERTY_START_DELIVER_TIME)
#: The properties for which the broker rewrites a message before it is stored (a delay level:
#: SCHEDULE_TOPIC_XXXX; a timer property: rmq_sys_wheel_timer), the triggers of
#: ``BrokerController._store_request``; a message with none of them is stored as sent.
REWRITE_TRIGGERS = frozenset((PROPERTY_DELAY_TIME_LEVEL, *TIMER_PROPERTY_KEYS))


def batch_timer_refusal(props: dict[str, str], index: int | None = None) -> str | None:
    """The MESSAGE_ILLEGAL remark for a batch (``index`` None: the batch's own properties) or batch
    item carrying a timer property, None when it carries none.

    Batches of timer messages are refused, as batches of delayed (``DELAY``) ones are. Apache
    RocketMQ 5.4's broker runs its timer hook on a batch's own properties only (the
    ``handleScheduleMessage`` put hook on the ``MessageExtBatch``), so items of a batch that carry
    ``TIMER_DELIVER_MS`` (Java's ``send(Collection)`` of messages with ``setDeliverTimeMs``) are
    stored to their topic and consumed at once, while a batch-level timer property moves the
    batch to rmq_sys_wheel_timer without ``TIMER_OUT_MS`` on its messages, which its timer cannot
    enqueue. Refusing says so to the sender instead of delivering early or not at all."""
    for key in _TIMER_KEYS:
        if key in props:
            what = "batch messages" if index is None else f"batch message {index}"
            return (f"{what} cannot be timer messages ({key} is set): send timer messages one by one, "
                    "not in a batch")
    return None


def max_delay_remark(cfg: MessageStoreConfig) -> str:
    """Apache's SendMessageProcessor remark for WHEEL_TIMER_MSG_ILLEGAL."""
    return (f"timer message illegal, the delay time should not be bigger than the max delay "
            f"{cfg.timer_max_delay_sec * 1000}ms; or if set del msg, the delay time should be bigger than "
            f"the current time")


def transform_timer_message(inner: MessageInner, cfg: MessageStoreConfig, now_ms: int,
                            timer: TimerMessageStore | None = None) -> MessageInner | PutMessageResult:
    """Apply the timer rewrite (module doc) to a message on its way to the store.

    Returns ``inner`` itself when it is no timer message (or is due now), ``inner`` rewritten in
    place to rmq_sys_wheel_timer (the caller owns it), or a refusal (a :class:`PutMessageResult` with
    ``WHEEL_TIMER_MSG_ILLEGAL``/``WHEEL_TIMER_NOT_ENABLE`` and a remark). ``timer``'s stats
    count refusals and past-due sends. The caller checks the transaction type (none or commit).
    """
    props = inner.properties
    if (PROPERTY_TIMER_DELIVER_MS not in props and PROPERTY_TIMER_DELAY_SEC not in props
            and PROPERTY_TIMER_DELAY_MS not in props and PROPERTY_START_DELIVER_TIME not in props):
        return inner  # every plain send passes here: four dict look-ups, no generator
    if inner.topic == TIMER_TOPIC or PROPERTY_TIMER_OUT_MS in props:
        return inner
    if PROPERTY_DELAY_TIME_LEVEL in props and inner.delay_level > 0:
        cleaned = {k: v for k, v in props.items() if k not in _TIMER_KEYS}
        return dataclasses.replace(inner, properties=cleaned, encoded=None)
    if not cfg.timer_wheel_enable:
        return PutMessageResult(PutMessageStatus.WHEEL_TIMER_NOT_ENABLE,
                                remark=f"accurate timer message is not enabled, timerWheelEnable is "
                                       f"{str(cfg.timer_wheel_enable).lower()}")
    try:
        if PROPERTY_TIMER_DELAY_SEC in props:
            deliver_ms = now_ms + int(props[PROPERTY_TIMER_DELAY_SEC]) * 1000
        elif PROPERTY_TIMER_DELAY_MS in props:
            deliver_ms = now_ms + int(props[PROPERTY_TIMER_DELAY_MS])
        elif PROPERTY_TIMER_DELIVER_MS in props:
            deliver_ms = int(props[PROPERTY_TIMER_DELIVER_MS])
        else:
            deliver_ms = int(props[PROPERTY_START_DELIVER_TIME])
    except ValueError:
        bad = ", ".join(f"{k}={props[k]!r}" for k in _TIMER_KEYS if k in props)
        return PutMessageResult(PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL,
                                remark=f"timer message illegal, the delivery time is not a number ({bad})")
    if deliver_ms > now_ms:
        if deliver_ms - now_ms > cfg.timer_max_delay_sec * 1000:
            if timer is not None:
                timer.stats.refused_max_delay += 1
            return PutMessageResult(PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL, remark=max_delay_remark(cfg))
        precision = cfg.timer_precision_ms
        if deliver_ms % precision == 0:
            deliver_ms -= precision
        else:
            deliver_ms = deliver_ms // precision * precision
        _to_timer_topic(inner, deliver_ms)
        return inner
    if PROPERTY_TIMER_DEL_UNIQKEY in props:
        return PutMessageResult(PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL, remark=max_delay_remark(cfg))
    if timer is not None:
        timer.stats.past_due_at_send += 1
    return inner


def _to_timer_topic(inner: MessageInner, out_ms: int) -> None:
    """Rewrite ``inner`` in place (the send path's MessageInner is its own: copying it costs more
    than the rest) to rmq_sys_wheel_timer queue 0 with ``TIMER_OUT_MS``/``REAL_TOPIC``/``REAL_QID``."""
    props = inner.properties
    out, real_qid = str(out_ms), str(inner.queue_id)
    encoded = inner.encoded
    if (encoded and not encoded.endswith("\x02") and PROPERTY_TIMER_OUT_MS not in props
            and PROPERTY_REAL_TOPIC not in props and PROPERTY_REAL_QUEUE_ID not in props
            and PROPERTY_DELAY_TIME_LEVEL not in props):
        # Three new keys, appended to the dict: appended to the encoded string they give what
        # encode_properties(props) would (``encoded`` matches ``props``), without re-encoding.
        inner.encoded = (f"{encoded}\x02{PROPERTY_TIMER_OUT_MS}\x01{out}\x02{PROPERTY_REAL_TOPIC}\x01"
                         f"{inner.topic}\x02{PROPERTY_REAL_QUEUE_ID}\x01{real_qid}")
    else:
        inner.encoded = None
        props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
    props[PROPERTY_TIMER_OUT_MS] = out
    props[PROPERTY_REAL_TOPIC] = inner.topic
    props[PROPERTY_REAL_QUEUE_ID] = real_qid
    inner.topic = TIMER_TOPIC
    inner.queue_id = 0
    inner.tags_code = None


class TimerCollector(Collector):
    """Scrape-time timer metrics (prefix ``rocketmq_broker_timer_``): gauges ``pending`` (not yet
    delivered), ``due_undelivered`` (due, not yet delivered), ``enqueue_backlog``; counters
    ``enqueued``, ``delivered``, ``delivered_at_once`` (already due when enqueued), ``deleted``,
    ``rolled``, ``refused`` {reason="max_delay"}, ``past_due`` (due at send: stored at once),
    ``put_failures``; histogram ``delivery_lag_seconds`` (delivery time minus the end of the
    timer's slot, or minus the arrival for one already due)."""

    def __init__(self, timer: TimerMessageStore, ready: Callable[[], bool]) -> None:
        self.timer = timer
        self.ready = ready

    def collect(self) -> Iterable[Metric]:
        prefix = "rocketmq_broker_timer_"
        t = self.timer
        s = t.stats
        ok = self.ready()

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(prefix + name, doc)
            g.add_metric([], value)
            return g

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(prefix + name, doc)
            c.add_metric([], value)
            return c

        yield gauge("pending", "Timer messages not yet delivered (in the wheel or not yet enqueued)",
                    t.pending() if ok else 0)
        yield gauge("due_undelivered", "Timer messages whose time has come but that are not delivered yet",
                    t.due_undelivered() if ok else 0)
        yield gauge("enqueue_backlog", "Timer messages stored but not yet in the wheel",
                    t.enqueue_backlog() if ok else 0)
        yield counter("enqueued", "Timer messages put into the wheel", s.enqueued)
        yield counter("delivered", "Timer messages delivered to their topic", s.delivered)
        yield counter("delivered_at_once", "Timer messages already due when enqueued, delivered at once",
                      s.delivered_at_once)
        yield counter("deleted", "Timer messages cancelled by a TIMER_DEL_UNIQKEY mark", s.deleted)
        yield counter("rolled", "Timers beyond the roll window re-put to the timer topic", s.rolled)
        yield counter("past_due", "Sends whose delivery time had passed: stored to their topic at once",
                      s.past_due_at_send)
        yield counter("put_failures", "Failed delivery puts (retried)", s.put_failures)
        refused = CounterMetricFamily(prefix + "refused", "Timer sends refused", labels=["reason"])
        refused.add_metric(["max_delay"], s.refused_max_delay)
        yield refused
        buckets: list[tuple[str, float]] = []
        acc = 0
        for bound, n in zip(LAG_BUCKETS, s.lag_counts, strict=False):
            acc += n
            buckets.append((repr(float(bound)), acc))
        acc += s.lag_counts[-1]
        buckets.append(("+Inf", acc))
        h = HistogramMetricFamily(prefix + "delivery_lag_seconds",
                                  "Delivery time minus the earliest allowed delivery time of a timer message")
        h.add_metric([], buckets, s.lag_sum)
        yield h

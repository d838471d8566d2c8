"""Drive the real RocketMQ C++ client (PyPI ``rocketmq==0.4.4``) from the command line.

This script runs under the *compat* virtualenv's interpreter (see
``tests/compat/realclient.py``), never under the project's own: that venv has
the ``rocketmq`` package (a ctypes wrapper around the bundled
``librocketmq.so``). It prints one JSON object per line on stdout; the tests
parse those lines. Every line has an ``event`` member:

* ``started``  — the client started (producer/consumer), ``elapsed_ms`` since launch
* ``send``     — one sync send: ``i``, ``status`` (``SEND_OK``…), ``msg_id``, ``offset``, ``ms``, ``body``
* ``send_error`` — ``i``, ``error`` (exception class and text)
* ``batch``    — one batch send: ``count``, ``status``, ``msg_id``, ``offset``, ``bodies``
* ``msg``      — one delivery to a consumer: ``id``, ``topic``, ``tags``, ``keys``, ``body``,
  ``body_len``, ``queue_id``, ``queue_offset``, ``reconsume_times``, ``latency_ms``
  (now - born timestamp, same machine clock), ``result`` (``ok`` / ``later``), ``props``
* ``pull``     — one pull request (pull consumer): ``broker``, ``queue_id``, ``offset``,
  ``status``, ``next``, ``min``, ``max``, ``found``
* ``done``     — summary: ``reason`` (``expected``, ``timeout``, ``stopped``, ``duration``,
  ``count``, ``drained``) and counts

The C++ core writes its logs under ``$HOME/logs/rocketmq-cpp``: run this with
``HOME`` set to a scratch directory. Message bodies are C strings: text only.

Keep this file plain Python 3.11 with no imports from the project.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import threading
import time

START = time.monotonic()
_print_lock = threading.Lock()


def emit(event: str, **fields: object) -> None:
    """Print one JSON line and flush (the parent reads it live)."""
    line = json.dumps({"event": event, **fields}, sort_keys=True)
    with _print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def now_ms() -> int:
    return int(time.time() * 1000)


def since_start_ms() -> float:
    return round((time.monotonic() - START) * 1000, 1)


def _text(value: bytes | str | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


def _log_level(name: str) -> int:
    return {"fatal": 1, "error": 2, "warn": 3, "info": 4, "debug": 5, "trace": 6}[name]


def make_body(args: argparse.Namespace, i: int) -> str:
    """The text body of message ``i``: ``<prefix>-<i>``, padded with a pattern to ``--body-size``.

    ``--body-size`` may be a comma-separated list: message ``i`` gets entry ``i % len``.
    """
    head = f"{args.body_prefix}-{i}"
    sizes = [int(x) for x in str(args.body_size or 0).split(",")]
    size = sizes[i % len(sizes)]
    if size > len(head) + 1:
        pad_len = size - len(head) - 1
        alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
        # Not too compressible and not random: position-dependent text.
        pad = "".join(alphabet[(k * 7 + i + k // 36) % len(alphabet)] for k in range(pad_len))
        return f"{head}|{pad}"
    return head


def build_message(args: argparse.Namespace, i: int):  # type: ignore[no-untyped-def]
    from rocketmq.client import Message

    msg = Message(args.topic)
    if args.tags:
        msg.set_tags(args.tags)
    if args.keys:
        msg.set_keys(f"{args.keys}-{i}")
    for prop in args.property or []:
        key, _, value = prop.partition("=")
        msg.set_property(key, value)
    if args.delay_level:
        msg.set_delay_time_level(args.delay_level)
    body = make_body(args, i)
    msg.set_body(body)
    return msg, body


def sign_with_env_credentials(client) -> None:  # type: ignore[no-untyped-def]
    """``set_session_credentials`` from ROCKET_ACCESS_KEY/ROCKET_SECRET_KEY when both are set
    (environment, so keys never show on a command line)."""
    ak, sk = os.environ.get("ROCKET_ACCESS_KEY"), os.environ.get("ROCKET_SECRET_KEY")
    if ak and sk:
        client.set_session_credentials(ak, sk, "")


def new_producer(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from rocketmq.client import Producer
    from rocketmq.ffi import dll

    producer = Producer(args.group, timeout=args.send_timeout_ms)
    producer.set_namesrv_addr(args.namesrv)
    sign_with_env_credentials(producer)
    dll.SetProducerLogLevel(producer._handle, _log_level(args.log_level))
    if args.instance:
        dll.SetProducerInstanceName(producer._handle, args.instance.encode())
    producer.start()
    # The C++ core refreshes routes on a timer thread right after start. While
    # that thread holds the client's connection-table lock, a send on another
    # thread fails at once ("GetTransport of:<addr> get timed_mutex timeout",
    # then "No route info of this topic"): a client-side race, seen under load.
    # Let the start-up work finish before the first send.
    time.sleep(args.settle_ms / 1000)
    emit("started", role="producer", group=args.group, elapsed_ms=since_start_ms())
    return producer


def cmd_send(args: argparse.Namespace) -> int:
    producer = new_producer(args)
    failures = 0
    try:
        for i in range(args.start, args.start + args.count):
            msg, body = build_message(args, i)
            t0 = time.monotonic()
            try:
                res = producer.send_sync(msg)
            except Exception as exc:
                failures += 1
                emit("send_error", i=i, error=f"{type(exc).__name__}: {exc}",
                     ms=round((time.monotonic() - t0) * 1000, 2), at=round(time.time(), 3))
                continue
            emit("send", i=i, status="SEND_OK" if res.status == 0 else res.status.name,
                 status_code=int(res.status), msg_id=res.msg_id, offset=res.offset,
                 ms=round((time.monotonic() - t0) * 1000, 2), body=body if len(body) <= 200 else None,
                 body_len=len(body))
            if args.interval_ms:
                time.sleep(args.interval_ms / 1000)
    finally:
        producer.shutdown()
    emit("done", reason="count", sent=args.count - failures, failed=failures)
    return 0


def cmd_send_batch(args: argparse.Namespace) -> int:
    producer = new_producer(args)
    try:
        msgs, bodies = [], []
        for i in range(args.start, args.start + args.count):
            msg, body = build_message(args, i)
            msgs.append(msg)
            bodies.append(body)
        t0 = time.monotonic()
        try:
            res = producer.send_batch(msgs)
        except Exception as exc:
            emit("send_error", i=-1, error=f"{type(exc).__name__}: {exc}")
            emit("done", reason="count", sent=0, failed=args.count)
            return 0
        emit("batch", count=len(msgs), status="SEND_OK" if res.status == 0 else res.status.name,
             status_code=int(res.status), msg_id=res.msg_id, offset=res.offset,
             ms=round((time.monotonic() - t0) * 1000, 2), bodies=bodies)
    finally:
        producer.shutdown()
    emit("done", reason="count", sent=args.count, failed=0)
    return 0


_PROPS = ("UNIQ_KEY", "RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "RECONSUME_TIME", "CLUSTER", "TAGS", "KEYS",
          "MAX_OFFSET", "MIN_OFFSET", "DELAY", "REAL_TOPIC", "myprop")


def describe(msg, result: str) -> dict[str, object]:  # type: ignore[no-untyped-def]
    body = msg.body
    text = _text(body) or ""
    props = {}
    for name in _PROPS:
        value = msg.get_property(name)
        if value:
            props[name] = _text(value)
    born = msg.born_timestamp
    return {
        "id": msg.id,
        "topic": msg.topic,
        "tags": _text(msg.tags),
        "keys": _text(msg.keys),
        "body": text if len(text) <= 200 else None,
        "body_len": len(body or b""),
        "body_head": text[:40],
        "body_crc": _crc(body or b""),
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "reconsume_times": msg.reconsume_times,
        "store_size": msg.store_size,
        "born": born,
        "store": msg.store_timestamp,
        "latency_ms": now_ms() - born if born else None,
        "result": result,
        "props": props,
    }


def _crc(data: bytes) -> int:
    import zlib

    return zlib.crc32(data) & 0xFFFFFFFF


def cmd_push_consume(args: argparse.Namespace) -> int:
    from rocketmq.client import PushConsumer, RecvMessage
    from rocketmq.ffi import MSG_CALLBACK_FUNC, _CConsumeStatus, dll

    consumer = PushConsumer(args.group)
    consumer.set_namesrv_addr(args.namesrv)
    sign_with_env_credentials(consumer)
    dll.SetPushConsumerLogLevel(consumer._handle, _log_level(args.log_level))
    if args.instance:
        consumer.set_instance_name(args.instance)
    if args.threads:
        consumer.set_thread_count(args.threads)
    # One message per callback: with more, one failure sends the whole batch back.
    consumer.set_message_batch_max_size(args.batch_size)

    lock = threading.Lock()
    failed_once: set[str] = set()
    ok_keys: set[str] = set()
    reached = threading.Event()

    def identity(msg: RecvMessage) -> str:
        return _text(msg.body) or msg.id

    def on_message(_consumer: int, handle: int) -> int:
        # Our own ctypes callback: a Python exception escaping a ctypes callback
        # has no defined return value, so "reconsume later" is returned
        # explicitly (this is what the wrapper's subscribe() means by raising).
        try:
            msg = RecvMessage(handle)
            key = identity(msg)
            with lock:
                fail = args.fail_first > 0 and key not in failed_once and len(failed_once) < args.fail_first
                if fail:
                    failed_once.add(key)
                else:
                    ok_keys.add(key)
                count_ok = len(ok_keys)
            emit("msg", **describe(msg, "later" if fail else "ok"))
            if args.expect and count_ok >= args.expect:
                reached.set()
            if args.consume_sleep_ms:
                time.sleep(args.consume_sleep_ms / 1000)
            return _CConsumeStatus.RECONSUME_LATER.value if fail else _CConsumeStatus.CONSUME_SUCCESS.value
        except Exception as exc:  # never let an exception cross the C boundary
            emit("callback_error", error=f"{type(exc).__name__}: {exc}")
            return _CConsumeStatus.RECONSUME_LATER.value

    callback = MSG_CALLBACK_FUNC(on_message)
    consumer._callback_refs.append(callback)
    from rocketmq.exceptions import ffi_check

    ffi_check(dll.Subscribe(consumer._handle, args.topic.encode(), args.expression.encode()))
    ffi_check(dll.RegisterMessageCallback(consumer._handle, callback))
    consumer.start()
    emit("started", role="push-consumer", group=args.group, elapsed_ms=since_start_ms())
    if args.ready_file:
        with open(args.ready_file, "w") as fh:
            fh.write("ready\n")
    deadline = time.monotonic() + args.timeout
    reason = "timeout" if args.expect else "duration"
    while time.monotonic() < deadline:
        if args.expect and reached.wait(0.05):
            reason = "expected"
            break
        if args.stop_file and os.path.exists(args.stop_file):
            reason = "stopped"
            break
        if not args.expect:
            time.sleep(0.05)
    if args.linger:
        time.sleep(args.linger)
    t0 = time.monotonic()
    consumer.shutdown()
    with lock:
        emit("done", reason=reason, ok=len(ok_keys), failed_once=len(failed_once),
             shutdown_ms=round((time.monotonic() - t0) * 1000, 1))
    return 0


def cmd_pull_consume(args: argparse.Namespace) -> int:
    from rocketmq.client import PullConsumer, RecvMessage
    from rocketmq.exceptions import ffi_check
    from rocketmq.ffi import _CMessageQueue, _CPullStatus, dll

    consumer = PullConsumer(args.group)
    consumer.set_namesrv_addr(args.namesrv)
    sign_with_env_credentials(consumer)
    dll.SetPullConsumerLogLevel(consumer._handle, _log_level(args.log_level))
    consumer.start()
    emit("started", role="pull-consumer", group=args.group, elapsed_ms=since_start_ms())

    queues_ptr = ctypes.POINTER(_CMessageQueue)()
    size = ctypes.c_int()
    ffi_check(dll.FetchSubscriptionMessageQueues(consumer._handle, args.topic.encode(),
                                                 ctypes.pointer(queues_ptr), ctypes.pointer(size)))
    queues = [queues_ptr[i] for i in range(size.value)]
    emit("queues", queues=[{"broker": q.brokerName.decode(), "queue_id": q.queueId} for q in queues])
    offsets = {(q.brokerName, q.queueId): 0 for q in queues}
    seen = 0
    deadline = time.monotonic() + args.timeout
    reason = "timeout"
    status_names = {s.value: s.name for s in _CPullStatus}
    while time.monotonic() < deadline and reason != "expected":
        progressed = False
        for q in queues:
            key = (q.brokerName, q.queueId)
            for _ in range(1000):  # bounded per queue and round
                offset = offsets[key]
                res = dll.Pull(consumer._handle, ctypes.pointer(q), args.expression.encode(),
                               ctypes.c_longlong(offset), args.max_num)
                found = []
                if res.pullStatus == _CPullStatus.FOUND:
                    for k in range(int(res.size)):
                        found.append(describe(RecvMessage(res.msgFoundList[k]), "ok"))
                emit("pull", broker=q.brokerName.decode(), queue_id=q.queueId, offset=offset,
                     status=status_names.get(res.pullStatus, str(res.pullStatus)), next=res.nextBeginOffset,
                     min=res.minOffset, max=res.maxOffset, found=len(found))
                for item in found:
                    emit("msg", **item)
                seen += len(found)
                status = res.pullStatus
                next_offset = res.nextBeginOffset
                dll.ReleasePullResult(res)
                if status == _CPullStatus.BROKER_TIMEOUT:
                    break
                if next_offset != offset:
                    progressed = True
                offsets[key] = next_offset
                if status in (_CPullStatus.NO_NEW_MSG, _CPullStatus.OFFSET_ILLEGAL) or next_offset == offset:
                    break
            if args.expect and seen >= args.expect:
                reason = "expected"
                break
        if not progressed and reason != "expected":
            if not args.expect:
                reason = "drained"
                break
            time.sleep(0.2)
    ffi_check(dll.ReleaseSubscriptionMessageQueue(queues_ptr))
    consumer.shutdown()
    emit("done", reason=reason, received=seen)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namesrv", required=True, help="host:port[;host:port]")
    parser.add_argument("--log-level", default="warn", choices=["fatal", "error", "warn", "info", "debug", "trace"])
    sub = parser.add_subparsers(dest="command", required=True)

    def producer_opts(p: argparse.ArgumentParser) -> None:
        p.add_argument("--topic", required=True)
        p.add_argument("--group", default="PID_COMPAT")
        p.add_argument("--count", type=int, default=1)
        p.add_argument("--start", type=int, default=0, help="index of the first message")
        p.add_argument("--tags", default="")
        p.add_argument("--keys", default="", help="key prefix: message i gets <keys>-<i>")
        p.add_argument("--property", action="append", help="key=value user property")
        p.add_argument("--body-prefix", default="msg")
        p.add_argument("--body-size", default="0", help="pad bodies to this many bytes (or a,b,c: cycled)")
        p.add_argument("--delay-level", type=int, default=0)
        p.add_argument("--send-timeout-ms", type=int, default=3000)
        p.add_argument("--interval-ms", type=int, default=0)
        p.add_argument("--instance", default="", help="client instance name")
        p.add_argument("--settle-ms", type=int, default=300, help="pause between start and the first send")

    send = sub.add_parser("send", help="sync-send --count messages one by one")
    producer_opts(send)
    send.set_defaults(func=cmd_send)
    batch = sub.add_parser("send-batch", help="send --count messages as one batch")
    producer_opts(batch)
    batch.set_defaults(func=cmd_send_batch)

    push = sub.add_parser("push-consume", help="push-consume until --expect successes or --timeout")
    push.add_argument("--topic", required=True)
    push.add_argument("--group", required=True)
    push.add_argument("--expression", default="*")
    push.add_argument("--expect", type=int, default=0, help="stop after this many distinct successes")
    push.add_argument("--fail-first", type=int, default=0,
                      help="answer RECONSUME_LATER to the first delivery of the first K distinct messages")
    push.add_argument("--timeout", type=float, default=30.0)
    push.add_argument("--linger", type=float, default=0.0, help="keep consuming this long after --expect")
    push.add_argument("--threads", type=int, default=0)
    push.add_argument("--instance", default="", help="client instance name")
    push.add_argument("--batch-size", type=int, default=1, help="messages per callback (consumeMessageBatchMaxSize)")
    push.add_argument("--consume-sleep-ms", type=int, default=0)
    push.add_argument("--ready-file", default="", help="write this file once the consumer has started")
    push.add_argument("--stop-file", default="", help="shut down once this file exists")
    push.set_defaults(func=cmd_push_consume)

    pull = sub.add_parser("pull-consume", help="pull every queue from offset 0 until --expect or drained")
    pull.add_argument("--topic", required=True)
    pull.add_argument("--group", required=True)
    pull.add_argument("--expression", default="*")
    pull.add_argument("--expect", type=int, default=0)
    pull.add_argument("--max-num", type=int, default=32)
    pull.add_argument("--timeout", type=float, default=20.0)
    pull.set_defaults(func=cmd_pull_consume)

    args = parser.parse_args(argv)
    if not os.environ.get("HOME"):
        emit("warning", text="HOME is not set; the C++ core writes logs under $HOME/logs/rocketmq-cpp")
    return int(args.func(args))


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    # The C++ core's static destructors sometimes hang or crash at exit; leave at once.
    os._exit(code)

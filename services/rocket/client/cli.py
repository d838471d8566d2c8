"""Client-side ``rocket`` commands: produce, consume, topic, cluster, group.

:func:`register` adds them to the ``rocket`` typer app (``rocket/cli.py``).
Every command takes ``--namesrv/-n`` (``"host:port;host:port"``); without it
the address comes from ``$ROCKET_NAMESRV``, else from a running ``rocket
local up`` cluster in ``./data/local`` (asked through the hook given to
:func:`register`, so that the client does not depend on :mod:`rocket.local`),
else ``127.0.0.1:9876``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from rocket.client.output import OutputFormat, new_table, output_option, print_document, stdout_console
from rocket.runtime import run

console = stdout_console()
err_console = Console(stderr=True)
#: Where :func:`resolve_namesrv` finds a running local cluster's NameServers (set by :func:`register`).
_local_namesrv: Callable[[], str | None] | None = None

NAMESRV_HELP = "NameServers 'host:port;host:port' (default: $ROCKET_NAMESRV, a running local cluster, 127.0.0.1:9876)"
SYSTEM_TOPIC_PREFIXES = ("%RETRY%", "%DLQ%", "rmq_sys_", "SCHEDULE_TOPIC", "RMQ_SYS_", "TBW102", "SELF_TEST_TOPIC",
                         "OFFSET_MOVED_EVENT", "TRANS_CHECK_MAX_TIME_TOPIC", "BenchmarkTest")


def resolve_namesrv(namesrv: str | None) -> str:
    """The NameServer list to use (see the module docs)."""
    if namesrv:
        return namesrv
    env = os.environ.get("ROCKET_NAMESRV")
    if env:
        return env
    local = _local_namesrv() if _local_namesrv is not None else None
    return local or "127.0.0.1:9876"


def _fail(message: str, code: int = 1) -> typer.Exit:
    err_console.print(f"[red]error:[/red] {message}")
    return typer.Exit(code)


def _run(coro: Any) -> Any:
    """Run a coroutine; turn client errors into a one-line message and exit code 1."""
    from rocket.client import MQClientError
    from rocket.remoting import RemotingError

    try:
        return run(coro)
    except (MQClientError, RemotingError, KeyError, LookupError, ValueError) as exc:
        raise _fail(str(exc).strip("'\"")) from None


# -- produce / consume -------------------------------------------------------------------


def _payloads(count: int | None, size: int, file: Path | None, stdin: bool) -> Iterator[bytes]:
    if file is not None or stdin:
        stream = sys.stdin.buffer if stdin or str(file) == "-" else open(file, "rb")  # type: ignore[arg-type]
        try:
            n = 0
            for line in stream:
                body = line.rstrip(b"\r\n")
                if not body:
                    continue
                yield body
                n += 1
                if count is not None and n >= count:
                    return
        finally:
            if stream is not sys.stdin.buffer:
                stream.close()
        return
    filler = (b"RocketCluster " * (size // 14 + 1))
    for i in range(count if count is not None else 1):
        head = f"{i} ".encode()
        yield (head + filler)[:max(size, len(head))]


_DURATION_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    """``1500ms``, ``30s``, ``5m``, ``2h``, ``1d`` or a bare number of seconds, in ms.
    Raises ``ValueError`` for anything else or a negative value."""
    t = text.strip().lower()
    for unit in ("ms", "s", "m", "h", "d"):
        if t.endswith(unit) and t[: -len(unit)].replace(".", "", 1).isdigit():
            return int(float(t[: -len(unit)]) * _DURATION_UNITS_MS[unit])
    if t.replace(".", "", 1).isdigit():
        return int(float(t) * 1000)
    raise ValueError(f"--delay {text!r}: expected a duration such as 1500ms, 30s, 5m, 2h or 1d")


def _parse_time_ms(text: str) -> int:
    """ms since the epoch, or an ISO 8601 time (naive = local time). Raises ``ValueError``."""
    t = text.strip()
    if t.isdigit():
        return int(t)
    try:
        return int(datetime.fromisoformat(t).timestamp() * 1000)
    except ValueError:
        raise ValueError(f"--deliver-at {text!r}: expected ms since the epoch or an ISO time") from None


def produce(
    topic: str = typer.Argument(..., help="Topic to send to (created through TBW102 if it does not exist)."),
    count: int | None = typer.Option(None, "--count", "-c", help="Messages to send (default 1; with --file: at most)."),
    size: int = typer.Option(128, "--size", "-s", help="Body size in bytes of generated messages."),
    file: Path | None = typer.Option(None, "--file", "-f", help="Send each line of this file ('-' = stdin)."),
    stdin: bool = typer.Option(False, "--stdin", help="Send each line read from stdin."),
    tags: str | None = typer.Option(None, "--tags", "-t", help="Tag of every message."),
    keys: str | None = typer.Option(None, "--keys", "-k", help="Keys; '{i}' is replaced by the message number."),
    deliver_at: str | None = typer.Option(None, "--deliver-at", help="Timer message: deliver at this time "
                                          "(ms since the epoch or ISO time, e.g. 2026-01-01T12:00:00+00:00)."),
    delay: str | None = typer.Option(None, "--delay", help="Timer message: deliver this long after the broker "
                                     "gets it (e.g. 1500ms, 30s, 5m, 2h, 1d; a bare number is seconds)."),
    batch_size: int = typer.Option(1, "--batch-size", "-b", help="Messages per SEND_BATCH_MESSAGE (1 = single sends)."),
    concurrency: int = typer.Option(32, "--concurrency", help="Sends in flight at once."),
    group: str = typer.Option("rocket-cli-producer", "--group", "-g", help="Producer group."),
    namesrv: str | None = typer.Option(None, "--namesrv", "-n", help=NAMESRV_HELP),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    """Send messages: generated ones (--count/--size) or lines of a file or stdin."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from rocket.client import Producer, build_message
    from rocket.percentiles import percentile

    addr = resolve_namesrv(namesrv)
    if deliver_at is not None and delay is not None:
        raise _fail("give --deliver-at or --delay, not both", 2)
    if (deliver_at is not None or delay is not None) and batch_size > 1:
        raise _fail("timer messages are sent one by one: drop --batch-size", 2)
    try:
        deliver_ms = _parse_time_ms(deliver_at) if deliver_at is not None else None
        delay_ms = parse_duration_ms(delay) if delay is not None else None
    except ValueError as exc:
        raise _fail(str(exc), 2) from None
    bodies = list(_payloads(count if (file or stdin) else (count or 1), size, file, stdin))
    if not bodies:
        raise _fail("nothing to send")

    async def main() -> tuple[int, int, float, list[float], int]:
        sent = failed = 0
        latencies: list[float] = []
        first_error: list[str] = []
        async with Producer(group, addr) as producer:
            sem = asyncio.Semaphore(max(1, concurrency))
            progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), console=err_console,
                                disable=quiet)
            started = time.perf_counter()
            with progress:
                task = progress.add_task(f"→ {topic}", total=len(bodies), rate="")

                async def send(start: int, chunk: list[bytes]) -> None:
                    nonlocal sent, failed
                    msgs = [build_message(topic, body, tags=tags,
                                          keys=keys.replace("{i}", str(start + j)) if keys else None,
                                          deliver_time_ms=deliver_ms, delay_ms=delay_ms)
                            for j, body in enumerate(chunk)]
                    async with sem:
                        t0 = time.perf_counter()
                        try:
                            if len(msgs) == 1:
                                await producer.send(msgs[0])
                            else:
                                await producer.send_batch(msgs)
                            sent += len(msgs)
                            latencies.append((time.perf_counter() - t0) * 1000)
                        except Exception as exc:
                            failed += len(msgs)
                            if not first_error:
                                first_error.append(f"{type(exc).__name__}: {exc}")
                    elapsed = time.perf_counter() - started
                    progress.update(task, advance=len(msgs), rate=f"{sent / elapsed:,.0f} msg/s" if elapsed else "")

                step = max(1, batch_size)
                await asyncio.gather(*(send(i, bodies[i:i + step]) for i in range(0, len(bodies), step)))
            elapsed = time.perf_counter() - started
        if first_error:
            err_console.print(f"[red]first failure:[/red] {first_error[0]}")
        return sent, failed, elapsed, sorted(latencies), sum(len(b) for b in bodies)

    sent, failed, elapsed, lat, nbytes = _run(main())
    rate = sent / elapsed if elapsed else 0.0
    console.print(f"sent {sent} message(s) to {topic} in {elapsed:.2f} s ({rate:,.0f} msg/s, "
                  f"{nbytes / 1e6 / elapsed if elapsed else 0:.2f} MB/s); failed {failed}; "
                  f"send latency p50 {percentile(lat, 50):.2f} ms, p99 {percentile(lat, 99):.2f} ms")
    if failed:
        raise typer.Exit(1)


def _printable(body: bytes, limit: int) -> str:
    text = body.decode("utf-8", errors="replace")
    return text if limit <= 0 or len(text) <= limit else text[:limit] + "…"


def consume(
    topic: str = typer.Argument(..., help="Topic to consume."),
    group: str = typer.Option("rocket-cli-consumer", "--group", "-g", help="Consumer group."),
    start_from: str = typer.Option("last", "--from", help="Where a new group starts: first, last or timestamp."),
    timestamp: str | None = typer.Option(None, "--timestamp", help="With --from timestamp: ms or ISO time."),
    tags: str = typer.Option("*", "--tags", "-t", help="Tag filter, e.g. 'TagA || TagB'."),
    count: int | None = typer.Option(None, "--count", "-c", help="Stop after this many messages."),
    timeout: float | None = typer.Option(None, "--timeout", help="Stop after this many seconds without messages."),
    broadcast: bool = typer.Option(False, "--broadcast", help="BROADCASTING mode (offsets kept locally)."),
    body_limit: int = typer.Option(200, "--body-limit", help="Print at most this many characters of a body (0 = all)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Do not print messages, only the summary."),
    namesrv: str | None = typer.Option(None, "--namesrv", "-n", help=NAMESRV_HELP),
) -> None:
    """Consume messages with a push consumer and print them (Ctrl-C to stop)."""
    from rocket.client import ConsumeFrom, MessageExt, MessageModel, PushConsumer

    addr = resolve_namesrv(namesrv)
    where = {"first": ConsumeFrom.FIRST_OFFSET, "last": ConsumeFrom.LAST_OFFSET,
             "timestamp": ConsumeFrom.TIMESTAMP}.get(start_from.lower())
    if where is None:
        raise _fail("--from must be first, last or timestamp", 2)
    ts: int | None = None
    if timestamp is not None:
        ts = int(timestamp) if timestamp.isdigit() else int(datetime.fromisoformat(timestamp).timestamp() * 1000)

    async def main() -> tuple[int, int]:
        seen = 0
        nbytes = 0
        done = asyncio.Event()
        last = [time.monotonic()]

        def handle(msgs: list[MessageExt]) -> None:
            nonlocal seen, nbytes
            for msg in msgs:
                if count is not None and seen >= count:
                    done.set()
                    return
                seen += 1
                nbytes += len(msg.body)
                if not quiet:
                    console.print(
                        f"[dim]{msg.topic} {msg.store_host} q{msg.queue_id}@{msg.queue_offset}[/dim] "
                        f"[cyan]{msg.msg_id}[/cyan] tags={msg.tags or '-'} keys={' '.join(msg.keys) or '-'} "
                        f"{_printable(msg.body, body_limit)}", markup=True, highlight=False, soft_wrap=True)
            last[0] = time.monotonic()
            if count is not None and seen >= count:
                done.set()

        consumer = PushConsumer(group, addr, handle, consume_from=where, consume_timestamp=ts,
                                message_model=MessageModel.BROADCASTING if broadcast else MessageModel.CLUSTERING,
                                consume_batch_size=32, consume_concurrency=1)
        consumer.subscribe(topic, tags)
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signal.SIGINT, done.set)
            loop.add_signal_handler(signal.SIGTERM, done.set)
        await consumer.start()
        try:
            while not done.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.2):
                        await done.wait()
                if timeout is not None and time.monotonic() - last[0] > timeout:
                    break
        finally:
            await consumer.shutdown()
        return seen, nbytes

    seen, nbytes = _run(main())
    err_console.print(f"consumed {seen} message(s), {nbytes} bytes, from {topic} as {group}")


# -- topic / cluster / group -------------------------------------------------------------

topic_app = typer.Typer(help="Create, list and delete topics.", no_args_is_help=True)
cluster_app = typer.Typer(help="Brokers of the cluster; write permission.", no_args_is_help=True)
group_app = typer.Typer(help="Consumer groups: progress and lag.", no_args_is_help=True)


@topic_app.command("create")
def topic_create(
    topic: str = typer.Argument(...),
    queues: int = typer.Option(8, "--queues", "-q", help="Read and write queues per broker group."),
    cluster: str = typer.Option("DefaultCluster", "--cluster", "-c"),
    perm: int = typer.Option(6, "--perm", help="Permission bits: 6 read+write, 4 read-only, 2 write-only."),
    order: bool = typer.Option(False, "--order", help="Mark as an ordered topic."),
    namesrv: str | None = typer.Option(None, "--namesrv", "-n", help=NAMESRV_HELP),
) -> None:
    """Create (or update) a topic on every master of a cluster."""
    from rocket.client import Admin

    async def main() -> list[str]:
        async with Admin(resolve_namesrv(namesrv)) as admin:
            return await admin.create_topic(topic, cluster=cluster, queue_nums=queues, perm=perm, order=order)

    brokers = _run(main())
    console.print(f"created topic {topic} ({queues} queues) on {', '.join(brokers)}")


@topic_app.command("delete")
def topic_delete(
    topic: str = typer.Argument(...),
    cluster: str = typer.Option("DefaultCluster", "--cluster", "-c"),
    namesrv: str | None = typer.Option(None, "--namesrv", "-n", help=NAMESRV_HELP),
) -> None:
    """Delete a topic from every master of a cluster and from the NameServers."""
    from rocket.client import Admin

    async def main() -> list[str]:
        async with Admin(resolve_namesrv(namesrv)) as admin:
            return await admin.delete_topic(topic, cluster=cluster)

    brokers = _run(main())
    console.print(f"deleted topic {topic} from {', '.join(brokers) or 'no broker'} and the NameServers")


@topic_app.command("list")
def topic_list(
    all_topics: bool = typer.Option(False, "--all", "-a", help="Include system, retry and DLQ topics."),
    routes: bool = typer.Option(False, "--routes", "-r", help="Show each topic's queues per broker group "
                                                            "(implied by -o wide)."),
    output: OutputFormat = output_option(),
    namesrv: str | None = typer.Option(None, "--namesrv", "-n", help=NAMESRV_HELP),
) -> None:
    """List topics known to the NameServers.

    ``-o table`` prints one name a line; ``-o wide`` (or ``--routes``) a table of each topic's queues;
    ``-o json|yaml`` ``{"topics": [{"topic", "queueDatas"?}]}`` (README.md, "Output for scripts").
    """
    from rocket.client import Admin, TopicRouteError
    from rocket.protocol import QueueData

    with_routes = routes or output is OutputFormat.WIDE

    async def main() -> list[tuple[str, list[QueueData] | None]]:
        async with Admin(resolve_namesrv(namesrv)) as admin:
            info = await admin.cluster_info()
            hidden = set(info.broker_addr_table) | set(info.cluster_addr_table)
            names = [t for t in await admin.topic_list()
                     if all_topics or (t not in hidden and not t.startswith(SYSTEM_TOPIC_PREFIXES))]
            rows: list[tuple[str, list[QueueData] | None]] = []
            for name in names:
                queue_datas: list[QueueData] | None = None
                if with_routes:
                    try:
                        route = await admin.topic_route(name)
                        queue_datas = sorted(route.queue_datas, key=lambda q: q.broker_name)
                    except TopicRouteError:
                        queue_datas = None
                rows.append((name, queue_datas))
            return rows

    rows = _run(main())
    if output.machine:
        topics: list[dict[str, Any]] = []
        for name, queue_datas in rows:
            entry: dict[str, Any] = {"topic": name}
            if with_routes:
                entry["queueDatas"] = None if queue_datas is None else [
                    {"brokerName": q.broker_name, "readQueueNums": q.read_queue_nums,
                     "writeQueueNums": q.write_queue_nums, "perm": q.perm, "topicSysFlag": q.topic_sys_flag}
                    for q in queue_datas]
            topics.append(entry)
        print_document({"topics": topics}, output)
    elif with_routes:
        table = new_table([("topic", "left"), ("queues", "left")])
        for name, queue_datas in rows:
            detail = "(no route)" if queue_datas is None else ", ".join(
                f"{q.broker_name}: r{q.read_queue_nums}/w{q.write_queue_nums} perm {q.perm}" for q in queue_datas)
            table.add_row(name, detail)
        console.print(table)
    else:
        for name, _ in rows:
            console.print(name, highlight=False, markup=False)


def _broker_document(b: Any) -> dict[str, Any]:
    """One ``brokers`` entry of ``rocket cluster list -o json`` (a :class:`~rocket.client.admin.BrokerInfo`)."""
    return {"clusterName": b.cluster, "brokerName": b.broker_name, "brokerId": b.broker_id,
            "brokerAddr": b.addr, "role": b.role, "error": b.error, "runtime": dict(sorted(b.runtime.items()))}


#: ``rocket cluster list`` figure columns: (header, GET_BROKER_RUNTIME_INFO key, justify).
_CLUSTER_COLUMNS: tuple[tuple[str, str, Any], ...] = (
    ("version", "brokerVersionDesc", "left"),
    ("put today", "msgPutTotalTodayNow", "right"),
    ("get today", "msgGetTotalTodayNow", "right"),
    ("commitlog max offset", "commitLogMaxOffset", "right"),
)
#: The columns ``-o wide`` adds (RocketMQ's runtime keys, as ``mqadmin clusterList -m`` shows some).
_CLUSTER_WIDE_COLUMNS: tuple[tuple[str, str, Any], ...] = (
    ("put tps", "putTps", "right"),
    ("get tps", "getTransferedTps", "right"),
    ("commitlog min offset", "commitLogMinOffset", "right"),
    ("disk ratio", "commitLogDiskRatio", "right"),
    ("permission", "brokerPermission", "right"),
    ("uptime", "runtime", "left"),
)


@cluster_app.command("list")
def cluster_list(
    cluster: str | None = typer.Option(None, "--cluster", "-c", help="Only this cluster."),
    output: OutputFormat = output_option(),
    namesrv: str | None = typer.Option(None, "--namesrv", "-n", help=NAMESRV_HELP),
) -> None:
    """Brokers with their addresses and runtime figures.

    ``-o json|yaml``: ``{"brokers": [{"clusterName", "brokerName", "brokerId", "brokerAddr", "role",
    "error", "runtime"}]}`` (README.md, "Output for scripts").
    """
    from rocket.client import Admin

    async def main() -> Any:
        async with Admin(resolve_namesrv(namesrv)) as admin:
            return await admin.cluster_list(cluster)

    brokers = _run(main())
    if output.machine:
        print_document({"brokers": [_broker_document(b) for b in brokers]}, output)
        return
    figures = _CLUSTER_COLUMNS + (_CLUSTER_WIDE_COLUMNS if output is OutputFormat.WIDE else ())
    table = new_table([("cluster", "left"), ("broker", "left"), ("id", "right"), ("role", "left"),
                       ("address", "left"), *((header, justify) for header, _, justify in figures),
                       ("status", "left")], title="brokers")
    for b in brokers:
        rt = b.runtime
        table.add_row(b.cluster, b.broker_name, str(b.broker_id), b.role, b.addr,
                      *(escape(rt.get(key, "")) for _, key, _ in figures),
                      "[red]" + escape(b.error) + "[/red]" if b.error else "ok")
    console.print(table)
    if not brokers:
        err_console.print("no brokers registered")


@cluster_app.command("wipe-write-perm")
def cluster_wipe_write_perm(
    broker: str = typer.Argument(..., help="Broker group name, e.g. broker-a."),
    namesrv: str | None = typer.Option(None, "--namesrv", "-n", help=NAMESRV_HELP),
) -> None:
    """Make a broker group read-only on every NameServer (drain it of producers)."""
    from rocket.client import Admin

    async def main() -> dict[str, int | str]:
        async with Admin(resolve_namesrv(namesrv)) as admin:
            return await admin.wipe_write_perm(broker)

    for ns, result in _run(main()).items():
        console.print(f"{ns}: {result if isinstance(result, str) else f'{result} topic(s) now read-only'}")


@cluster_app.command("add-write-perm")
def cluster_add_write_perm(
    broker: str = typer.Argument(..., help="Broker group name, e.g. broker-a."),
    namesrv: str | None = typer.Option(None, "--namesrv", "-n", help=NAMESRV_HELP),
) -> None:
    """Give a broker group its write permission back on every NameServer."""
    from rocket.client import Admin

    async def main() -> dict[str, int | str]:
        async with Admin(resolve_namesrv(namesrv)) as admin:
            return await admin.add_write_perm(broker)

    for ns, result in _run(main()).items():
        console.print(f"{ns}: {result if isinstance(result, str) else f'{result} topic(s) writable again'}")


def _print_ha(status: dict[str, Any]) -> None:
    console.print(f"{status['brokerName']} broker {status['brokerId']} at {status['brokerAddr']}: "
                  f"[bold]{status['brokerRole']}[/bold], epoch {status['epoch']} "
                  f"(epochs {status['epochs']}), CommitLog end {status['maxOffset']}")


@cluster_app.command("failover")
def cluster_failover(
    broker_name: str = typer.Option(..., "--broker-name", "-b", help="Broker group whose master is gone."),
    role: str | None = typer.Option(None, "--role", help="ASYNC_MASTER or SYNC_MASTER (default: the "
                                                         "broker's promotedBrokerRole)."),
    force: bool = typer.Option(False, "--force", help="Promote even while a NameServer lists a live master."),
    broker_id: int | None = typer.Option(None, "--broker-id", help="Controller mode: the controller broker id "
                                                                  "to elect (default: the lowest-id in-sync slave)."),
    namesrv: str | None = typer.Option(None, "--namesrv", "-n", help=NAMESRV_HELP),
) -> None:
    """Manual failover: promote the group's lowest-id slave to master (new epoch, brokerId 0). In
    controller mode the controllers elect it (ELECT_MASTER with designateElect, as mqadmin electMaster)."""
    from rocket.client import Admin

    async def main() -> dict[str, Any]:
        async with Admin(resolve_namesrv(namesrv)) as admin:
            return await admin.failover(broker_name, broker_role=role, force=force, broker_id=broker_id)

    _print_ha(_run(main()))


@cluster_app.command("promote")
def cluster_promote(
    addr: str = typer.Option(..., "--addr", "-a", help="The slave's remoting address host:port."),
    role: str | None = typer.Option(None, "--role", help="ASYNC_MASTER or SYNC_MASTER."),
    force: bool = typer.Option(False, "--force", help="Promote even while a NameServer lists a live master."),
    namesrv: str | None = typer.Option(None, "--namesrv", "-n", help=NAMESRV_HELP),
) -> None:
    """Promote the slave at --addr to master of its group."""
    from rocket.client import Admin

    async def main() -> dict[str, Any]:
        async with Admin(resolve_namesrv(namesrv)) as admin:
            return await admin.promote_broker(addr, broker_role=role, force=force)

    _print_ha(_run(main()))


@cluster_app.command("ha")
def cluster_ha(
    addr: str = typer.Option(..., "--addr", "-a", help="A broker's remoting address host:port."),
    output: OutputFormat = output_option(),
    namesrv: str | None = typer.Option(None, "--namesrv", "-n", help=NAMESRV_HELP),
) -> None:
    """A broker's replication state: role, epochs, slaves and their lag, its master.

    ``-o json|yaml``: the broker's GET_BROKER_HA_STATUS (907) document as it sends it
    (README.md, "Output for scripts"); ``-o wide`` adds the slaves' transfer offset and connection age.
    """
    from rocket.client import Admin

    async def main() -> dict[str, Any]:
        async with Admin(resolve_namesrv(namesrv)) as admin:
            return await admin.broker_ha_status(addr)

    status = _run(main())
    if output.machine:
        print_document(status, output)
        return
    _print_ha(status)
    wide = output is OutputFormat.WIDE
    columns: list[tuple[str, Any]] = [("slave", "left"), ("id", "right"), ("ack offset", "right"),
                                      ("lag bytes", "right"), ("lag seconds", "right"), ("in sync", "left")]
    if wide:
        columns += [("transfer offset", "right"), ("connected seconds", "right"), ("peer", "left")]
    table = new_table(columns, title="slaves")
    for sl in status["slaves"]:
        row = [sl["slaveAddr"], str(sl["slaveId"]), str(sl["ackOffset"]), str(sl["lagBytes"]),
               f"{sl['lagSeconds']:.3f}", "yes" if sl["inSync"] else "no"]
        if wide:
            row += [str(sl.get("transferOffset", "")), str(sl.get("connectedSeconds", "")), str(sl.get("peer", ""))]
        table.add_row(*row)
    if status["slaves"]:
        console.print(table)
    if status.get("master"):
        m = status["master"]
        console.print(f"master {m['addr']} (HA {m['haAddr']}): {m['state']}, epoch {m['epoch']}"
                      + (f", last error: {m['lastError']}" if m.get("lastError") else ""))


def _lag_document(lag: Any) -> dict[str, Any]:
    """``rocket group lag -o json``'s document for a :class:`~rocket.client.admin.GroupLag`."""
    return {
        "consumerGroup": lag.group,
        "source": lag.source,
        "consumeTps": lag.consume_tps,
        "totalLag": lag.total_lag,
        "queues": [{"topic": q.queue.topic, "brokerName": q.queue.broker_name, "queueId": q.queue.queue_id,
                    "brokerOffset": q.broker_offset, "consumerOffset": q.consumer_offset, "lag": q.lag,
                    "lastTimestamp": q.last_timestamp} for q in lag.queues],
    }


@group_app.command("lag")
def group_lag(
    group: str = typer.Argument(..., help="Consumer group."),
    topic: str | None = typer.Option(None, "--topic", "-t", help="Only this topic."),
    output: OutputFormat = output_option(),
    namesrv: str | None = typer.Option(None, "--namesrv", "-n", help=NAMESRV_HELP),
) -> None:
    """Per-queue progress of a consumer group: broker offset, consumer offset, lag.

    ``-o json|yaml``: ``{"consumerGroup", "source", "consumeTps", "totalLag", "queues": [{"topic",
    "brokerName", "queueId", "brokerOffset", "consumerOffset", "lag", "lastTimestamp"}]}`` (README.md,
    "Output for scripts"); ``-o wide`` adds the last consumed message's store time in ms.
    """
    from rocket.client import Admin

    async def main() -> Any:
        async with Admin(resolve_namesrv(namesrv)) as admin:
            return await admin.consumer_lag(group, topic)

    lag = _run(main())
    if output.machine:
        print_document(_lag_document(lag), output)
        return
    wide = output is OutputFormat.WIDE
    columns: list[tuple[str, Any]] = [("topic", "left"), ("broker", "left"), ("queue", "right"),
                                      ("broker offset", "right"), ("consumer offset", "right"), ("lag", "right"),
                                      ("last consumed", "left")]
    if wide:
        columns.append(("last timestamp ms", "right"))
    table = new_table(columns, title=f"consumer group {group} ({lag.source})")
    for q in lag.queues:
        last = (datetime.fromtimestamp(q.last_timestamp / 1000).isoformat(sep=" ", timespec="seconds")
                if q.last_timestamp else "")
        row = [q.queue.topic, q.queue.broker_name, str(q.queue.queue_id), str(q.broker_offset),
               str(q.consumer_offset) if q.consumer_offset >= 0 else "-", str(q.lag), last]
        if wide:
            row.append(str(q.last_timestamp))
        table.add_row(*row)
    console.print(table)
    console.print(f"total lag: [bold]{lag.total_lag}[/bold]" + (f", {lag.consume_tps:.1f} msg/s" if lag.consume_tps
                                                              else ""))


def register(app: typer.Typer, local_namesrv: Callable[[], str | None] | None = None) -> None:
    """Add the client commands to the ``rocket`` app.

    ``local_namesrv`` returns the NameServer list of a running local cluster
    (or None); :func:`resolve_namesrv` falls back on it.
    """
    global _local_namesrv
    _local_namesrv = local_namesrv
    app.command("produce")(produce)
    app.command("consume")(consume)
    app.add_typer(topic_app, name="topic")
    app.add_typer(cluster_app, name="cluster")
    app.add_typer(group_app, name="group")

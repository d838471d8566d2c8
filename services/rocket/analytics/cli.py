"""``rocket analytics``: the Spark jobs from the command line (a typer sub-app, :data:`analytics_app`).

Wire it into ``rocket.cli`` with ``app.add_typer(analytics_app, name="analytics")``.

Commands:

* ``rocket analytics logs --namesrv H:P --topics loghub-HDFS,... --out DIR`` (or ``--commitlog DIR`` / ``--loghub DIR``)
* ``rocket analytics traffic --namesrv H:P --topics A,B --out DIR`` (or ``--commitlog DIR``)
* ``rocket analytics accuracy [--loghub DIR] [--select [--leave-one-out]]``: GA/PA/FGA/FTA on the LogHub
  samples, no Spark.

Each job prints a table and writes Parquet, ``summary.json`` and ``report.md`` under ``--out``.
"""

from __future__ import annotations

from typing import Annotated

import typer

analytics_app = typer.Typer(no_args_is_help=True, help="Spark analytics: traffic and log-template jobs.")

_NAMESRV = typer.Option("--namesrv", help="NameServers 'host:port;host:port' (read from the brokers).")
_TOPICS = typer.Option("--topics", help="Comma-separated topics.")
_COMMITLOG = typer.Option("--commitlog", help="A broker store dir or its commitlog dir (offline).")
_OUT = typer.Option("--out", help="Output directory.")
_MASTER = typer.Option("--master", help="Spark master (default: configured, else local[2]).")
_START = typer.Option("--starting-offsets", help="earliest, latest, a timestamp or JSON per queue.")
_END = typer.Option("--ending-offsets", help="latest, earliest, a timestamp or JSON per queue.")


def _argv(**flags: str | None) -> list[str]:
    argv: list[str] = []
    for name, value in flags.items():
        if value:
            argv += [f"--{name.replace('_', '-')}", value]
    return argv


@analytics_app.command()
def logs(
    out: Annotated[str, _OUT],
    namesrv: Annotated[str | None, _NAMESRV] = None,
    topics: Annotated[str, _TOPICS] = "",
    commitlog: Annotated[str | None, _COMMITLOG] = None,
    loghub: Annotated[str | None, typer.Option("--loghub", help="A LogHub folder, read directly.")] = None,
    systems: Annotated[str, typer.Option("--systems", help="With --loghub: systems to read.")] = "",
    ground_truth: Annotated[str | None, typer.Option("--ground-truth", help="LogHub folder with "
                                                     "*_structured.csv (default: found).")] = None,
    starting_offsets: Annotated[str, _START] = "earliest",
    ending_offsets: Annotated[str, _END] = "latest",
    master: Annotated[str | None, _MASTER] = None,
    log_format: Annotated[str | None, typer.Option(
        "--log-format", help="Header format: auto (learned per topic, default), a LogHub preset (HDFS, Spark, ...) "
        "or loghub notation '<Date> <Time> <Level> <Component>: <Content>'.")] = None,
    events_topic: Annotated[str | None, typer.Option(
        "--events-topic", help="Publish new templates and error spikes to this topic (JSON bodies).")] = None,
    follow: Annotated[bool, typer.Option("--follow", help="Keep running (Structured Streaming), one "
                                         "micro-batch per trigger.")] = False,
    trigger_seconds: Annotated[str | None, typer.Option("--trigger-seconds", help="With --follow: trigger "
                                                        "interval (default 10).")] = None,
    checkpoint: Annotated[str | None, typer.Option("--checkpoint", help="With --follow: checkpoint dir "
                                                   "(default <out>/checkpoint).")] = None,
) -> None:
    """Split headers (learned per topic), mine templates, count levels per minute, find error spikes, score."""
    from rocket.analytics.jobs.logs import main

    argv = _argv(out=out, namesrv=namesrv, topics=topics, commitlog=commitlog, loghub=loghub, systems=systems,
                 ground_truth=ground_truth, starting_offsets=starting_offsets, ending_offsets=ending_offsets,
                 master=master, log_format=log_format, events_topic=events_topic, trigger_seconds=trigger_seconds,
                 checkpoint=checkpoint)
    raise typer.Exit(main([*argv, "--follow"] if follow else argv))


@analytics_app.command()
def traffic(
    out: Annotated[str, _OUT],
    namesrv: Annotated[str | None, _NAMESRV] = None,
    topics: Annotated[str, _TOPICS] = "",
    commitlog: Annotated[str | None, _COMMITLOG] = None,
    starting_offsets: Annotated[str, _START] = "earliest",
    ending_offsets: Annotated[str, _END] = "latest",
    master: Annotated[str | None, _MASTER] = None,
) -> None:
    """Per topic and minute: messages, bytes, store-latency percentiles, top producers."""
    from rocket.analytics.jobs.traffic import main

    raise typer.Exit(main(_argv(out=out, namesrv=namesrv, topics=topics, commitlog=commitlog,
                                starting_offsets=starting_offsets, ending_offsets=ending_offsets, master=master)))


@analytics_app.command()
def accuracy(
    loghub: Annotated[str | None, typer.Option("--loghub", help="LogHub folder (default: found).")] = None,
    select: Annotated[bool, typer.Option("--select", help="Rerun the setting selection on the selection "
                                         "systems first (slow: the whole grid on the 12 systems), then score "
                                         "the chosen setting.")] = False,
    leave_one_out: Annotated[bool, typer.Option("--leave-one-out", help="With --select: also each system's "
                                                "GA under the setting chosen on the 11 others.")] = False,
) -> None:
    """GA, PA, FGA and FTA of the one default setting on the LogHub samples (no Spark): per system, means."""
    import sys

    from rocket.analytics.evaluate import evaluate_loghub, print_table, select_setting
    from rocket.analytics.mining import DEFAULT_SETTINGS

    settings = DEFAULT_SETTINGS
    if select:
        def progress(done: int, total: int) -> None:
            if done % 100 == 0 or done == total:
                print(f"  {done}/{total} settings scored", file=sys.stderr, flush=True)

        sel = select_setting(loghub, leave_one_out, progress)
        settings = sel.settings
        same = "same" if sel.settings == DEFAULT_SETTINGS else "DIFFERS"
        typer.echo(f"chosen on the selection systems: {sel.settings} (GA {sel.on_select:.3f}; report systems "
                   f"{sel.on_report:.3f}; default setting: {same})")
        typer.echo(f"reverse check, chosen on the report systems: {sel.reverse} (GA {sel.reverse_on_report:.3f}; "
                   f"selection systems {sel.reverse_on_select:.3f})")
        if sel.leave_one_out is not None:
            loo = sel.leave_one_out
            typer.echo("leave-one-out (each system scored with the setting chosen on the 11 others): "
                       + " ".join(f"{k} {v:.3f}" for k, v in loo.items())
                       + f"; mean {sum(loo.values()) / len(loo):.3f}")
    results = evaluate_loghub(loghub, settings)
    if not results:
        typer.echo("no LogHub sample with ground truth (*_structured.csv) found", err=True)
        raise typer.Exit(1)
    print_table(results)

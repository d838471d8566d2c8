"""The ``rocket`` command line (typer)."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, help="RocketCluster: a RocketMQ-style message queue.")


@app.callback()
def _root() -> None:
    """RocketCluster command line."""


def main() -> None:
    """Entry point of the ``rocket`` console script."""
    app()


if __name__ == "__main__":
    main()

"""``python -m rocket_operator``: run the RocketCluster operator (kopf) until SIGTERM/SIGINT.

Serves every namespace unless ``--namespace`` is given (repeatable). Runs
standalone unless ``--peering NAME`` names a kopf peering object (several
replicas, one active). See :mod:`rocket_operator.settings` for the
``ROCKET_OPERATOR_*`` environment variables (HTTP port, recheck intervals).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

import kopf


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and run kopf; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="python -m rocket_operator", description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--namespace", action="append", default=[],
                        help="serve this namespace (repeatable; default: all namespaces)")
    parser.add_argument("--peering", default=None, help="kopf peering name (default: standalone)")
    parser.add_argument("--http-port", type=int, default=None,
                        help="port of /metrics and /healthz (default $ROCKET_OPERATOR_HTTP_PORT or 8080)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    args = parser.parse_args(argv)
    if args.http_port is not None:
        os.environ["ROCKET_OPERATOR_HTTP_PORT"] = str(args.http_port)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from rocket_operator import handlers  # noqa: F401  (registers the handlers)

    kopf.run(
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        standalone=args.peering is None,
        peering_name=args.peering,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

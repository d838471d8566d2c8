#!/usr/bin/env bash
# Install Prometheus and promtool (Debian's `prometheus` package, 2.42 on
# bookworm) when they are missing. Needs root and apt-get; the package's
# service is not started (no systemd in a container; the tests start their own
# Prometheus on loopback with a generated config).
#
# Usage: tests/tools/install_prometheus.sh   -> prints the path of promtool
# Idempotent: does nothing when both binaries already work.
set -euo pipefail

have() { command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; }

if ! have; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "install_prometheus: prometheus/promtool missing and apt-get is not available" >&2
        exit 1
    fi
    if [ "$(id -u)" != 0 ]; then
        echo "install_prometheus: prometheus/promtool missing; run as root: apt-get install -y prometheus" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    # policy-rc.d keeps the package's init script from starting a daemon.
    policy=/usr/sbin/policy-rc.d
    made_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' > "$policy"
        chmod +x "$policy"
        made_policy=1
    fi
    trap '[ "$made_policy" = 1 ] && rm -f "$policy"' EXIT
    apt=(apt-get -o DPkg::Lock::Timeout=600)
    if ! "${apt[@]}" install -y -q --no-install-recommends prometheus >&2; then
        "${apt[@]}" update -q >&2
        "${apt[@]}" install -y -q --no-install-recommends prometheus >&2
    fi
fi

if ! have; then
    echo "install_prometheus: apt-get install prometheus did not provide prometheus and promtool" >&2
    exit 1
fi
prometheus --version 2>&1 | head -1 >&2
command -v promtool

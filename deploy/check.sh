#!/usr/bin/env bash
# Check the Prometheus alert rules and run their unit tests with promtool.
# Installs Debian's `prometheus` package (which ships promtool) when missing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if ! command -v promtool >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "deploy/check.sh: promtool is missing; run as root to install Debian's prometheus package" >&2
        exit 1
    fi
    echo "deploy/check.sh: installing promtool (Debian package prometheus)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi

cd "$here/prometheus"
promtool check rules alerts.yaml
promtool test rules alerts_test.yaml

#!/usr/bin/env bash
# The alert rules (charts/wuhu/files/wuhu-alerts.rules.yaml) are valid Prometheus rules, and
# each alert fires, and stays quiet, as its unit tests say (charts/tests/wuhu-alerts.test.yaml).
# promtool comes with Debian's prometheus package (scripts/setup installs it).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if ! command -v promtool >/dev/null; then
    echo "promtool is missing: scripts/setup installs the prometheus package" >&2
    exit 1
fi
promtool check rules "$root/charts/wuhu/files/wuhu-alerts.rules.yaml"
cd "$root/charts/tests"
promtool test rules wuhu-alerts.test.yaml

#!/usr/bin/env bash
# Runs client.test.mjs against a real wuhu-worker: starts the worker (SQLite in a temporary
# directory, the scripted model, a per-run subject prefix) on the nats-server of
# WUHU_TEST_NATS_URL, runs the test with node, and stops the worker by PID.
#
#   tests/external/run.sh <path to wuhu-worker>
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
worker=$1
: "${WUHU_TEST_NATS_URL:?run with scripts/test, which starts a nats-server}"
if [ ! -d "$here/node_modules/nats" ]; then
    echo "npm package nats is not installed in $here: scripts/test installs it (npm install)" >&2
    exit 1
fi
data=$(mktemp -d /tmp/wuhu-external.XXXXXX)
prefix="wuhu_ext$$"
cat >"$data/script.json" <<'JSON'
{"responses":[
  {"chunks":["The build ","passed ","with no ","failures."],"chunk_delay_ms":20},
  {"text":"Anything else?"}
]}
JSON
"$worker" --nats "$WUHU_TEST_NATS_URL" --store "sqlite://$data" --script "$data/script.json" \
    --prefix "$prefix" --worker-id ext-worker 2>"$data/worker.log" &
pid=$!
cleanup() {
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -rf "$data"
}
trap cleanup EXIT
status=0
WUHU_PREFIX="$prefix" node "$here/client.test.mjs" || status=$?
if [ "$status" -ne 0 ]; then
    echo "worker log:" >&2
    cat "$data/worker.log" >&2
fi
exit "$status"

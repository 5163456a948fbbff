#!/usr/bin/env bash
# Runs approval.test.mjs against a real wuhu-worker whose `echo` calls wait for approval (the
# tools file): SQLite in a temporary directory, the scripted model, a per-run subject prefix,
# on the nats-server of WUHU_TEST_NATS_URL; the worker is stopped by PID.
#
#   tests/external/run_approval.sh <path to wuhu-worker>
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
worker=$1
: "${WUHU_TEST_NATS_URL:?run with scripts/test, which starts a nats-server}"
if [ ! -d "$here/node_modules/nats" ]; then
    echo "npm package nats is not installed in $here: scripts/test installs it (npm install)" >&2
    exit 1
fi
data=$(mktemp -d /tmp/wuhu-approval.XXXXXX)
prefix="wuhu_appr$$"
cat >"$data/script.json" <<'JSON'
{"responses":[
  {"tool_calls":[{"name":"echo","arguments":{"text":"hello"}}]},
  {"text":"It said hello."}
]}
JSON
cat >"$data/tools.json" <<'JSON'
{"tools": {"echo": {"approval": "always"}}}
JSON
"$worker" --nats "$WUHU_TEST_NATS_URL" --store "sqlite://$data" --script "$data/script.json" \
    --tools "$data/tools.json" --prefix "$prefix" --worker-id appr-worker 2>"$data/worker.log" &
pid=$!
cleanup() {
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -rf "$data"
}
trap cleanup EXIT
status=0
WUHU_PREFIX="$prefix" node "$here/approval.test.mjs" || status=$?
if [ "$status" -ne 0 ]; then
    echo "worker log:" >&2
    cat "$data/worker.log" >&2
fi
exit "$status"

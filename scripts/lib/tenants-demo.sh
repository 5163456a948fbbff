#!/usr/bin/env bash
# A two-tenant fleet, as docs/security.md configures it: nats-server with
# docs/examples/nats-tenants.conf (the fleet's account and the accounts of the tenants acme and
# globex), two workers with --tenancy logged in as the fleet's user, and the tenants' own
# applications using the same session id: each sees its own session only, cannot name the
# other's, and the operator sees both. Stops everything it started (by PID).
#
#   scripts/lib/tenants-demo.sh <build dir>   (scripts/run --tenants; ctest tenants_demo)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$1
worker=$bin/app/wuhu-worker
wuhuctl=$bin/client/wuhuctl
cd "$root"

source scripts/lib/nats.sh
DATA=$(mktemp -d /tmp/wuhu-tenants.XXXXXX)
WORKER_PIDS=()
cleanup() {
    for pid in "${WORKER_PIDS[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid"
            wait "$pid" 2>/dev/null || true
        fi
    done
    nats_stop
    rm -rf "$DATA"
}
trap cleanup EXIT
nats_start -c docs/examples/nats-tenants.conf
url=$WUHU_TEST_NATS_URL

for w in worker-1 worker-2; do
    WUHU_NATS_PASSWORD=fleet-password "$worker" --nats "$url" --nats-user fleet \
        --nats-inbox-prefix _INBOX_fleet --tenancy --store "sqlite://$DATA" \
        --script scripts/demo-script.json --worker-id "$w" --metrics-addr off 2>"$DATA/$w.log" &
    WORKER_PIDS+=($!)
done
# wuhuctl as a user of docs/examples/nats-tenants.conf (its passwords are <user>-password).
as() {
    local user=$1; shift
    WUHU_NATS_PASSWORD=$user-password "$wuhuctl" --nats "$url" --user "$user" "$@"
}
up=
for _ in $(seq 100); do
    if as acme-app status demo >/dev/null 2>&1; then up=1; break; fi
    sleep 0.1
done
[ -n "$up" ] || { echo "the fleet did not answer acme's application" >&2; cat "$DATA"/*.log >&2; exit 1; }
echo "nats-server with docs/examples/nats-tenants.conf, worker-1 and worker-2 with --tenancy (data in $DATA)"
echo
echo "== acme's application sends to its session 'demo' and watches it:"
as acme-app watch demo --until-idle --timeout 60 &
WATCH_PID=$!
sleep 0.5
as acme-app send demo "Please prepare the weekly report." --author Ann >/dev/null
status=0; wait "$WATCH_PID" || status=$?
if [ "$status" -ne 0 ]; then echo "watch exited with $status" >&2; exit "$status"; fi
echo
echo "== globex's application uses the same session id 'demo': another session"
as globex-app send demo "Summarize the open tickets." --author Bo >/dev/null
as globex-app watch demo --until-idle --timeout 60 > "$DATA/globex.watch"
grep -q "Summarize the open tickets" "$DATA/globex.watch" || { echo "globex's demo lacks its message" >&2; exit 1; }
if grep -q "Please prepare the weekly report" "$DATA/globex.watch"; then echo "globex saw acme's message" >&2; exit 1; fi
echo "globex's demo holds globex's message and nothing of acme's (the scripted model answers both alike):"
head -n 3 "$DATA/globex.watch"
echo
echo "== acme's fleet view lists acme's sessions only:"
as acme-app sessions
echo
echo "== acme's application cannot name globex's subjects (nats-server refuses them):"
refused=0
as acme-app --prefix wuhu.globex status demo >/dev/null 2>&1 || refused=$?
if [ "$refused" -ne 3 ]; then echo "acme reached globex (exit $refused)" >&2; exit 1; fi
echo "wuhuctl --prefix wuhu.globex status demo: no reply (exit 3)"
echo
echo "== the operator, in the fleet's account, sees every tenant:"
as operator --inbox-prefix _INBOX_operator sessions
as operator --inbox-prefix _INBOX_operator --tenant globex status demo
echo
echo "stopping the workers (SIGTERM)"
for i in "${!WORKER_PIDS[@]}"; do
    kill -TERM "${WORKER_PIDS[$i]}"
    wait "${WORKER_PIDS[$i]}" || { echo "worker-$((i + 1)) exited with $?" >&2; exit 1; }
done
WORKER_PIDS=()

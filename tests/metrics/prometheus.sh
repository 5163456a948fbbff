#!/usr/bin/env bash
# A real Prometheus server (Debian's prometheus package, on 127.0.0.1) scrapes two workers
# while wuhuctl drives scripted sessions through them, and answers PromQL queries: sessions per
# loop state (wuhu_loop_sessions by state), and command rates by verb.
#
#   tests/metrics/prometheus.sh <wuhu-worker> <wuhuctl>     (WUHU_TEST_NATS_URL: a nats-server)
set -euo pipefail
worker=$1
wuhuctl=$2
: "${WUHU_TEST_NATS_URL:?run with scripts/test, which starts a nats-server}"
command -v prometheus >/dev/null || { echo "prometheus is missing: scripts/setup installs it" >&2; exit 1; }
work=$(mktemp -d /tmp/wuhu-prom.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
prefix="prom$$"
cat > "$work/script.json" <<'JSON'
{"responses":[{"chunks":["one ","two ","three"],"chunk_delay_ms":300,
               "tool_calls":[{"name":"sleep","arguments":{"ms":800}}]},
              {"text":"done"}]}
JSON
targets=()
for w in 1 2; do
    port=$(free_port)
    "$worker" --nats "$WUHU_TEST_NATS_URL" --store "sqlite://$work/data" --script "$work/script.json" \
        --prefix "$prefix" --worker-id "prom-w$w" --metrics-addr "127.0.0.1:$port" \
        2>"$work/worker$w.log" &
    pids+=($!)
    targets+=("\"127.0.0.1:$port\"")
done
prom_port=$(free_port)
cat > "$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: wuhu
    static_configs:
      - targets: [$(IFS=,; echo "${targets[*]}")]
EOF
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
    --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
pids+=($!)

query() {  # PromQL -> the result vector as JSON
    python3 - "$prom_port" "$1" <<'EOF'
import json, sys, urllib.parse, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}/api/v1/query?" + urllib.parse.urlencode({"query": sys.argv[2]})
try:
    body = json.load(urllib.request.urlopen(url, timeout=5))
    print(json.dumps(body["data"]["result"]))
except Exception as e:
    print("[]")
EOF
}
wait_for() {  # what, PromQL, python condition on `r` (the result vector)
    local what=$1 q=$2 cond=$3
    for _ in $(seq 1 120); do
        local r
        r=$(query "$q")
        if python3 -c "import json,sys; r=json.loads(sys.argv[1]); sys.exit(0 if ($cond) else 1)" "$r"; then
            echo "prometheus: $what: $r"
            return 0
        fi
        sleep 0.5
    done
    echo "FAIL: $what: the last answer to $q was $(query "$q")" >&2
    tail -5 "$work/prometheus.log" >&2
    return 1
}
wait_for "both workers are scraped" 'up{job="wuhu"}' 'len(r) == 2 and all(x["value"][1] == "1" for x in r)'
# Scripted load: sessions spread over both workers by the queue group.
sends=()
for i in $(seq 1 12); do
    "$wuhuctl" --nats "$WUHU_TEST_NATS_URL" --prefix "$prefix" send "load-$i" "go $i" >/dev/null &
    sends+=($!)
done
for p in "${sends[@]}"; do
    wait "$p" || { echo "FAIL: wuhuctl send failed" >&2; exit 1; }
done
wait_for "sessions out of idle, by state" 'sum by (state) (wuhu_loop_sessions{state!="idle"})' \
    'any(float(x["value"][1]) > 0 for x in r)'
wait_for "command rates by verb" 'sum by (verb) (rate(wuhu_commands_total{result="ok"}[10s]))' \
    'any(x["metric"].get("verb") == "enqueue" and float(x["value"][1]) > 0 for x in r)'
wait_for "every session idle again, on both workers" 'sum by (state) (wuhu_loop_sessions)' \
    'sum(float(x["value"][1]) for x in r if x["metric"]["state"] == "idle") == 12 and sum(float(x["value"][1]) for x in r if x["metric"]["state"] != "idle") == 0'
wait_for "both workers took sessions" 'wuhu_sessions_loaded' \
    'len(r) == 2 and all(float(x["value"][1]) > 0 for x in r)'
echo "prometheus: every query answered"

#!/usr/bin/env bash
# The Helm chart (charts/wuhu/), rendered as Helm renders it: Go's text/template with the sprig
# functions (Debian's golang-go and golang-github-masterminds-sprig-dev; charts/tests/render),
# for the default values and for the postgres and sqlite modes. Each rendering must parse, pass
# yamllint, name only the ports, paths and WUHU_* settings the worker really has, and its values
# must pass values.schema.json. The dashboard may name only metrics a live worker exports.
#
#   tests/charts/chart.sh <path to wuhu-worker>     (WUHU_TEST_NATS_URL: a nats-server)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
worker=$1
: "${WUHU_TEST_NATS_URL:?run with scripts/test, which starts a nats-server}"
for tool in go yamllint python3; do
    command -v "$tool" >/dev/null || { echo "$tool is missing: scripts/setup installs it" >&2; exit 1; }
done
python3 -c 'import yaml, jsonschema' || { echo "python3-yaml and python3-jsonschema are missing: scripts/setup installs them" >&2; exit 1; }
work=$(mktemp -d /tmp/wuhu-chart.XXXXXX)
pid=
cleanup() {
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

echo "chart: building the renderer"
GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE="$work/gocache" GOFLAGS= \
    go build -o "$work/render" "$root/charts/tests/render/main.go"

# The worker's settings (CLI11 prints each flag's variable as "(Env:WUHU_...)").
"$worker" --help | grep -o 'Env:WUHU_[A-Z_]*' | sed 's/Env://' | sort -u > "$work/env"

# A live scrape: the metric names the worker exports.
"$worker" --nats "$WUHU_TEST_NATS_URL" --store "sqlite://$work/data" --prefix "chart$$" \
    --worker-id chart-worker --metrics-addr 127.0.0.1:0 2>"$work/worker.log" &
pid=$!
address=
for _ in $(seq 1 100); do
    address=$(grep -o 'metrics on http://[0-9.:]*' "$work/worker.log" | sed 's|metrics on http://||' | head -1 || true)
    [ -n "$address" ] && break
    sleep 0.1
done
[ -n "$address" ] || { echo "the worker logged no metrics address:" >&2; cat "$work/worker.log" >&2; exit 1; }
python3 - "$address" > "$work/scrape.txt" <<'EOF'
import sys, urllib.request
print(urllib.request.urlopen(f"http://{sys.argv[1]}/metrics", timeout=5).read().decode())
EOF

render_case() {  # name, then overrides as JSON
    local name=$1 overrides=$2
    python3 - "$root/charts/wuhu" "$overrides" > "$work/$name.values.json" <<'EOF'
import json, sys, yaml, jsonschema
chart, overrides = sys.argv[1], json.loads(sys.argv[2])
values = yaml.safe_load(open(f"{chart}/values.yaml"))
def merge(a, b):
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(a.get(k), dict):
            merge(a[k], v)
        else:
            a[k] = v
merge(values, overrides)
jsonschema.validate(values, json.load(open(f"{chart}/values.schema.json")))
meta = yaml.safe_load(open(f"{chart}/Chart.yaml"))
print(json.dumps({"values": values, "chart": {"Name": meta["name"], "Version": meta["version"],
                                              "AppVersion": meta["appVersion"]}}))
EOF
    "$work/render" "$root/charts/wuhu" "$work/$name.values.json" "test" > "$work/$name.yaml"
    yamllint -d '{extends: default, rules: {line-length: disable, document-start: disable, comments: disable, comments-indentation: disable}}' "$work/$name.yaml"
    python3 - "$work/$name.yaml" "$work/env" "$work/scrape.txt" "$root/charts/wuhu/files/wuhu-dashboard.json" "$name" <<'EOF'
import json, re, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
known_env = set(open(sys.argv[2]).read().split())
scrape = open(sys.argv[3]).read()
case = sys.argv[5]
failures = []
def check(cond, what):
    if not cond:
        failures.append(what)
kinds = {}
for d in docs:
    check({"apiVersion", "kind", "metadata"} <= d.keys(), f"a document without apiVersion/kind/metadata: {d}")
    kinds.setdefault(d["kind"], []).append(d)
config = next(c for c in kinds["ConfigMap"] if not c["metadata"]["name"].endswith(("-files", "-dashboard", "-nats-accounts")))
metrics_port = int(config["data"]["WUHU_METRICS_ADDR"].rsplit(":", 1)[1])
for k in config["data"]:
    check(k in known_env, f"the ConfigMap sets {k}, which wuhu-worker does not read")
workers = kinds.get("Deployment", []) + kinds.get("StatefulSet", [])
check(len(workers) == 1, f"one Deployment or StatefulSet, not {len(workers)}")
for w in workers:
    pod = w["spec"]["template"]["spec"]
    check(pod["securityContext"]["runAsNonRoot"] is True, "the pod runs as non-root")
    check(pod["terminationGracePeriodSeconds"] >= 15, "the grace period covers the drain")
    (c,) = pod["containers"]
    check(c["securityContext"]["readOnlyRootFilesystem"] is True, "a read-only root filesystem")
    check(c["securityContext"]["allowPrivilegeEscalation"] is False, "no privilege escalation")
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    check(ports == {"metrics": metrics_port}, f"the container port is the metrics port: {ports}")
    check(c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}, "liveness on /healthz")
    check(c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}, "readiness on /readyz")
    for e in c.get("env", []):
        check(e["name"] in known_env or not e["name"].startswith("WUHU_"), f"env {e['name']} is not a worker setting")
    check("resources" in c and "requests" in c["resources"], "resource requests")
    if w["kind"] == "StatefulSet":
        check(w["spec"]["replicas"] == 1, "sqlite mode runs one worker")
        check(config["data"]["WUHU_STORE"] == "sqlite:///data", "sqlite mode stores in the volume")
        check(any(m["mountPath"] == "/data" for m in c["volumeMounts"]), "the volume is mounted at /data")
    else:
        check(w["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0, "rolling updates drop nobody")
        check(any(e["name"] == "WUHU_STORE" and "secretKeyRef" in e["valueFrom"] for e in c["env"]),
              "postgres mode takes the store URL from a Secret")
for s in kinds.get("Service", []):
    check(s["spec"]["ports"][0]["targetPort"] == "metrics", "the Service targets the metrics port")
for m in kinds.get("ServiceMonitor", []):
    check(m["spec"]["endpoints"][0]["path"] == "/metrics" and m["spec"]["endpoints"][0]["port"] == "metrics",
          "the ServiceMonitor scrapes /metrics")
for r in kinds.get("PrometheusRule", []):
    check(len(r["spec"]["groups"][0]["rules"]) == 7, "the PrometheusRule carries the 7 alerts")
exported = set(re.findall(r"^(wuhu_[a-z_]+)", scrape, re.M))
check(len(exported) > 10, f"the live scrape exports the metrics ({len(exported)})")
for d in kinds.get("ConfigMap", []):
    if d["metadata"]["name"].endswith("-dashboard"):
        dash = json.loads(d["data"]["wuhu.json"])
        check(d["metadata"]["labels"].get("grafana_dashboard") == "1", "the sidecar's label")
        named = set(re.findall(r"wuhu_[a-z_]+", json.dumps(dash)))
        check(named and named <= exported, f"the dashboard names metrics the worker does not export: {sorted(named - exported)}")
check(config["data"].get("WUHU_CONSOLE") == "true", "the console is served by default")
if case == "postgres":
    check(config["data"].get("WUHU_MAX_REQUESTS_IN_FLIGHT") == "512", "limits.maxRequestsInFlight")
    check(config["data"].get("WUHU_LANE_MAX_BYTES") == "8MiB", "limits.laneMaxBytes")
    check(config["data"].get("WUHU_PG_LOCK_TIMEOUT") == "2s", "limits.pgLockTimeout")
    check(config["data"].get("WUHU_INFERENCE_IDLE_TIMEOUT") == "5m", "limits.inferenceIdleTimeout")
    check(config["data"].get("WUHU_RETRY_MAX_ATTEMPTS") == "3", "limits.retryMaxAttempts")
if case == "tenants":
    check(config["data"].get("WUHU_TENANCY") == "true", "tenancy is on")
    check(config["data"].get("WUHU_NATS_USER") == "fleet", "the fleet's NATS user")
    check(config["data"].get("WUHU_NATS_INBOX_PREFIX") == "_INBOX_fleet", "the fleet's inbox prefix")
    (w,) = workers
    env = {e["name"]: e for e in w["spec"]["template"]["spec"]["containers"][0]["env"]}
    check(env.get("WUHU_NATS_PASSWORD", {}).get("valueFrom", {}).get("secretKeyRef", {}).get("name") == "wuhu-nats-fleet",
          "the fleet's NATS password from its Secret")
    accounts = [c for c in kinds["ConfigMap"] if c["metadata"]["name"].endswith("-nats-accounts")]
    check(len(accounts) == 1 and "password" not in json.dumps(accounts[0]["data"]).replace("password: $", ""),
          "one nats accounts ConfigMap, with no password in it")
    open(sys.argv[1] + ".accounts.conf", "w").write(accounts[0]["data"]["accounts.conf"])
expected = {"default": {"Deployment", "PodDisruptionBudget"}, "sqlite": {"StatefulSet"},
            "tenants": {"Deployment", "ConfigMap"},
            "postgres": {"Deployment", "HorizontalPodAutoscaler", "ServiceMonitor", "PrometheusRule", "PodDisruptionBudget"}}[case]
check(expected <= kinds.keys(), f"{case}: expected {sorted(expected)}, rendered {sorted(kinds)}")
if failures:
    print("\n".join(f"FAIL ({case}): {f}" for f in failures), file=sys.stderr)
    sys.exit(1)
print(f"chart ({case}): {len(docs)} manifests: {', '.join(sorted(kinds))}")
EOF
}

render_case default '{"postgres": {"existingSecret": "wuhu-postgres"}}'
render_case sqlite '{"mode": "sqlite", "podDisruptionBudget": {"enabled": false}}'
render_case postgres '{"postgres": {"existingSecret": "wuhu-postgres"}, "replicas": 4,
  "limits": {"maxRequestsInFlight": 512, "laneMaxBytes": "8MiB", "tenantRequestsPerSecond": 200,
             "pgLockTimeout": "2s", "metricsMaxConnections": 16,
             "inferenceIdleTimeout": "5m", "retryMaxAttempts": 3},
  "nats": {"existingSecret": "wuhu-nats"},
  "autoscaling": {"enabled": true},
  "metrics": {"serviceMonitor": {"enabled": true, "labels": {"release": "prom"}},
              "prometheusRule": {"enabled": true}},
  "providers": {"endpoints": {"openai": {"kind": "openai", "base_url": "https://api.openai.com/v1",
                                         "api_key_env": "OPENAI_API_KEY"}}},
  "providerSecrets": [{"name": "OPENAI_API_KEY", "secretName": "wuhu-openai", "key": "api-key"}],
  "tools": {"tools": {"get_weather": {"description": "The weather", "schema": {"type": "object"}}}}}'

render_case tenants '{"postgres": {"existingSecret": "wuhu-postgres"},
  "nats": {"user": "fleet", "passwordSecret": {"name": "wuhu-nats-fleet", "key": "password"},
           "inboxPrefix": "_INBOX_fleet"},
  "tenancy": {"enabled": true, "tenants": ["acme", "globex-2"]}}'

# The rendered accounts, as a NATS deployment includes them: nats-server loads them, and a
# worker with tenancy behind them keeps the two tenants apart (wuhuctl as each tenant's
# application, and as the operator).
echo "chart: starting nats-server with the rendered accounts"
printf 'include "accounts.conf"\n' > "$work/nats.conf"
cp "$work/tenants.yaml.accounts.conf" "$work/accounts.conf"
export WUHU_FLEET_PASSWORD=fleet-pw WUHU_OPERATOR_PASSWORD=operator-pw ACME_APP_PASSWORD=acme-pw \
    ACME_TOOLS_PASSWORD=acme-tools-pw GLOBEX_2_APP_PASSWORD=globex-pw GLOBEX_2_TOOLS_PASSWORD=globex-tools-pw
nats-server -c "$work/nats.conf" -t > "$work/nats-check.log" 2>&1 || { cat "$work/nats-check.log" >&2; exit 1; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
nats-server -c "$work/nats.conf" -a 127.0.0.1 -p "$port" > "$work/nats.log" 2>&1 &
nats_pid=$!
wuhuctl=$(dirname "$worker")/../client/wuhuctl
WUHU_NATS_PASSWORD=fleet-pw "$worker" --nats "nats://127.0.0.1:$port" --nats-user fleet \
    --nats-inbox-prefix _INBOX_fleet --tenancy --store "sqlite://$work/tenant-data" \
    --worker-id chart-tenants --metrics-addr off 2>"$work/tenant-worker.log" &
tenant_pid=$!
as() {  # user password, then wuhuctl's arguments
    local user=$1 password=$2; shift 2
    WUHU_NATS_PASSWORD=$password "$wuhuctl" --nats "nats://127.0.0.1:$port" --user "$user" "$@"
}
up=
for _ in $(seq 1 100); do
    if as acme-app acme-pw send s1 "for acme" >/dev/null 2>&1; then up=1; break; fi
    sleep 0.1
done
status=0
if [ -z "$up" ]; then
    echo "FAIL (tenants): no answer through the rendered accounts" >&2; status=1
else
    as globex-2-app globex-pw send s1 "for globex" >/dev/null
    acme_view=$(as acme-app acme-pw --json sessions)
    globex_view=$(as globex-2-app globex-pw --json status s1)
    fleet_view=$(as operator operator-pw --inbox-prefix _INBOX_operator --json sessions)
    python3 - "$acme_view" "$fleet_view" <<'PYEOF' || status=1
import json, sys
acme, fleet = json.loads(sys.argv[1]), json.loads(sys.argv[2])
ids = [r["id"] for r in acme["sessions"]]
assert ids == ["s1"], f"acme sees {ids}"
named = sorted(f'{r["tenant"]}/{r["id"]}' for r in fleet["sessions"])
assert named == ["acme/s1", "globex-2/s1"], f"the operator sees {named}"
PYEOF
    if as acme-app acme-pw --prefix wuhu.globex-2 status s1 >/dev/null 2>&1; then
        echo "FAIL (tenants): acme-app reached globex-2's subjects" >&2; status=1
    fi
    echo "chart (tenants): the rendered accounts keep acme and globex-2 apart"
fi
kill -TERM "$tenant_pid" "$nats_pid"; wait "$tenant_pid" "$nats_pid" 2>/dev/null || true
[ "$status" -eq 0 ] || { cat "$work/tenant-worker.log" >&2; exit 1; }

# Two tenants whose password variables would be one are refused, with the reason.
python3 - "$work/tenants.values.json" > "$work/collide.values.json" <<'EOF'
import json, sys
v = json.load(open(sys.argv[1])); v["values"]["tenancy"]["tenants"] = ["acme-x", "acme_x"]; print(json.dumps(v))
EOF
if "$work/render" "$root/charts/wuhu" "$work/collide.values.json" test > /dev/null 2> "$work/collide.err"; then
    echo "FAIL: tenants acme-x and acme_x rendered with one password variable" >&2
    exit 1
fi
grep -q "would share the password variables" "$work/collide.err" || { cat "$work/collide.err" >&2; exit 1; }

# A limit the worker does not have is refused, with the reason.
python3 - "$work/default.values.json" > "$work/badlimit.values.json" <<'EOF'
import json, sys
v = json.load(open(sys.argv[1])); v["values"]["limits"] = {"maxRequestz": 5}; print(json.dumps(v))
EOF
if "$work/render" "$root/charts/wuhu" "$work/badlimit.values.json" test > /dev/null 2> "$work/badlimit.err"; then
    echo "FAIL: an unknown limit rendered" >&2
    exit 1
fi
grep -q "limits.maxRequestz is not one of the worker's limits" "$work/badlimit.err" || { cat "$work/badlimit.err" >&2; exit 1; }

# postgres mode without the store's Secret is refused, with the reason.
if "$work/render" "$root/charts/wuhu" "$work/default.values.json" test >/dev/null 2>&1; then :; fi
python3 - "$work/default.values.json" > "$work/nosecret.values.json" <<'EOF'
import json, sys
v = json.load(open(sys.argv[1])); v["values"]["postgres"]["existingSecret"] = ""; print(json.dumps(v))
EOF
if "$work/render" "$root/charts/wuhu" "$work/nosecret.values.json" test > /dev/null 2> "$work/nosecret.err"; then
    echo "FAIL: postgres mode rendered without postgres.existingSecret" >&2
    exit 1
fi
grep -q "postgres.existingSecret is required" "$work/nosecret.err" || { cat "$work/nosecret.err" >&2; exit 1; }
echo "chart: every case rendered and checked"

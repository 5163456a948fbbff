# Starts and stops a throwaway nats-server for tests: 127.0.0.1, a free port, stopped by PID.
#
#   source scripts/lib/nats.sh
#   nats_start [ARGS...]  # exports WUHU_TEST_NATS_URL (and NATS_PORT); exits the shell with an
#                         # error if it cannot; ARGS go to nats-server (-c <config>)
#   nats_start_ws [ARGS...]  # the same, with a WebSocket listener: exports WUHU_NATS_WS_URL
#   nats_stop

nats_start() {
    NATS_DIR=$(mktemp -d /tmp/wuhu-nats.XXXXXX)
    local tries port
    for tries in 1 2 3; do
        port=$((20000 + RANDOM % 30000))
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            continue
        fi
        nats-server "$@" -a 127.0.0.1 -p "$port" -l "$NATS_DIR/nats.log" -P "$NATS_DIR/nats.pid" &
        NATS_PID=$!
        for _ in $(seq 50); do
            if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
                export WUHU_TEST_NATS_URL="nats://127.0.0.1:$port" NATS_PORT=$port
                echo "nats: started on 127.0.0.1:$port (pid $NATS_PID)"
                return 0
            fi
            kill -0 "$NATS_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill "$NATS_PID" 2>/dev/null || true
    done
    echo "nats: could not start; log:" >&2
    cat "$NATS_DIR/nats.log" >&2 || true
    exit 1
}

# nats_start_ws: as nats_start, with a WebSocket listener on another free port of 127.0.0.1
# (the web console's way in: docs/console.md); exports WUHU_NATS_WS_URL.
nats_start_ws() {
    local ws conf
    for _ in $(seq 20); do
        ws=$((20000 + RANDOM % 30000))
        (exec 3<>"/dev/tcp/127.0.0.1/$ws") 2>/dev/null || break  # nobody listens: free
    done
    conf=$(mktemp /tmp/wuhu-nats-ws.XXXXXX)
    printf 'websocket {\n  host: 127.0.0.1\n  port: %s\n  no_tls: true\n}\n' "$ws" >"$conf"
    nats_start -c "$conf" "$@"
    rm -f "$conf"
    export WUHU_NATS_WS_URL="ws://127.0.0.1:$ws"
}

nats_stop() {
    if [ -n "${NATS_PID:-}" ] && kill -0 "$NATS_PID" 2>/dev/null; then
        kill "$NATS_PID"
        for _ in $(seq 50); do
            kill -0 "$NATS_PID" 2>/dev/null || break
            sleep 0.1
        done
    fi
    [ -n "${NATS_DIR:-}" ] && rm -rf "$NATS_DIR"
    NATS_PID=
    NATS_DIR=
}

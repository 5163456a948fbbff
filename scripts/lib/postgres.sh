# Starts and stops a throwaway PostgreSQL 15 server for tests and benchmarks: a fresh cluster in
# a temporary directory, on 127.0.0.1 and a free port, stopped by its own PID.
#
#   source scripts/lib/postgres.sh
#   pg_start              # exports WUHU_TEST_PG_DSN; exits the shell with an error if it cannot
#   pg_stop
#
# As root, the cluster belongs to the `postgres` user (initdb refuses root).

PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}

_pg_free_port() {
    local port
    for _ in $(seq 50); do
        port=$((20000 + RANDOM % 30000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return 0
        fi
    done
    return 1
}

_pg_as_owner() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

pg_start() {
    PG_DIR=$(mktemp -d /tmp/wuhu-pg.XXXXXX)
    if [ "$(id -u)" -eq 0 ]; then
        chown postgres:postgres "$PG_DIR"
    fi
    chmod 0700 "$PG_DIR"
    if ! _pg_as_owner "$PG_BIN/initdb" -D "$PG_DIR/data" -U postgres --auth=trust -E UTF8 \
        --locale=C.UTF-8 >"$PG_DIR/initdb.log" 2>&1; then
        echo "postgres: initdb failed:" >&2
        cat "$PG_DIR/initdb.log" >&2
        exit 1
    fi
    local tries
    for tries in 1 2 3; do
        PG_PORT=$(_pg_free_port) || { echo "postgres: no free port" >&2; exit 1; }
        if _pg_as_owner "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 \
            -o "-k $PG_DIR -p $PG_PORT -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=on -c synchronous_commit=on" \
            start >/dev/null; then
            PG_PID=$(head -1 "$PG_DIR/data/postmaster.pid")
            export WUHU_TEST_PG_DSN="host=127.0.0.1 port=$PG_PORT dbname=postgres user=postgres"
            echo "postgres: started on 127.0.0.1:$PG_PORT (pid $PG_PID)"
            return 0
        fi
    done
    echo "postgres: could not start; server log:" >&2
    cat "$PG_DIR/server.log" >&2 || true
    exit 1
}

pg_stop() {
    if [ -n "${PG_PID:-}" ] && kill -0 "$PG_PID" 2>/dev/null; then
        kill -INT "$PG_PID"  # fast shutdown
        for _ in $(seq 100); do
            kill -0 "$PG_PID" 2>/dev/null || break
            sleep 0.1
        done
    fi
    if [ -n "${PG_DIR:-}" ]; then
        rm -rf "$PG_DIR"
    fi
    PG_PID=
    PG_DIR=
}

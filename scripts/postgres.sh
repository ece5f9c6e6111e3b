#!/usr/bin/env bash
# A throw-away PostgreSQL cluster for the ledger tests: installs Debian's
# `postgresql` when missing, creates a cluster in a fresh temporary
# directory (initdb), starts it on a free loopback port (pg_ctl) as a
# non-root user, and prints the environment the tests read:
#
#   ORCH_TEST_PG_URL       postgres://orchestrator@127.0.0.1:PORT/ledger_tests (no password)
#   ORCH_TEST_PG_PASSWORD  the password of that user, also in ORCH_TEST_PG_PASSWORD_ENV's name
#   ORCH_TEST_PG_DIR       the cluster's directory (for `stop`)
#
# Usage: eval "$(bash scripts/postgres.sh start)" ... bash scripts/postgres.sh stop "$ORCH_TEST_PG_DIR"
# `pause DIR` stops the server (`pg_ctl stop -m fast`, what a restart does to
# its sessions) and keeps the cluster; `resume DIR` starts it again on the
# same port: the database-restart test takes the ledger away under a daemon.
# Logs go to stderr; stdout carries only the `export` lines.
set -euo pipefail

pg_bin() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && { echo "$d"; return 0; }
  done
  return 1
}

# Who owns and runs the cluster: PostgreSQL refuses to run as root.
run_as() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

start() {
  local bin
  if ! bin="$(pg_bin)"; then
    echo "installing postgresql for the ledger tests (apt-get)..." >&2
    if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
    bin="$(pg_bin)"
  fi
  if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin postgres
  fi
  local dir port password
  dir="$(mktemp -d /tmp/orch-pg.XXXXXX)"
  chmod 755 "$dir"
  [ "$(id -u)" = 0 ] && chown postgres "$dir"
  # A free loopback port: bind port 0 and keep what the kernel chose.
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  password="$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
  printf '%s\n' "$port" >"$dir/port"
  printf '%s\n' "$password" >"$dir/pwfile"
  [ "$(id -u)" = 0 ] && chown postgres "$dir/pwfile"
  run_as "$bin/initdb" -D "$dir/data" -U orchestrator --pwfile="$dir/pwfile" \
    --auth=scram-sha-256 --encoding=UTF8 --no-locale >"$dir/initdb.log" 2>&1 ||
    { cat "$dir/initdb.log" >&2; exit 1; }
  rm -f "$dir/pwfile"
  serve "$bin" "$dir"
  PGPASSWORD="$password" run_as "$bin/psql" -h 127.0.0.1 -p "$port" -U orchestrator -d postgres \
    -qc "CREATE DATABASE ledger_tests" >&2
  echo "export ORCH_TEST_PG_URL=postgres://orchestrator@127.0.0.1:$port/ledger_tests"
  echo "export ORCH_TEST_PG_PASSWORD=$password"
  echo "export ORCH_TEST_PG_DIR=$dir"
}

# Starts the server of the cluster in $2 on the port it was created with.
serve() {
  local bin="$1" dir="$2"
  run_as "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $(cat "$dir/port") -k $dir -c max_connections=200 -c fsync=off" \
    start >&2 || { cat "$dir/server.log" >&2; exit 1; }
}

test_cluster() {
  case "$1" in /tmp/orch-pg.*) ;; *) echo "not a test cluster: $1" >&2; exit 2 ;; esac
}

pause() {
  test_cluster "$1"
  run_as "$(pg_bin)/pg_ctl" -D "$1/data" -m fast -w stop >&2
}

resume() {
  test_cluster "$1"
  serve "$(pg_bin)" "$1"
}

stop() {
  local dir="$1" bin
  bin="$(pg_bin)"
  test_cluster "$dir"
  run_as "$bin/pg_ctl" -D "$dir/data" -m immediate stop >&2 || true
  rm -rf "$dir"
}

case "${1:-}" in
  start) start ;;
  stop) stop "${2:?the cluster directory}" ;;
  pause) pause "${2:?the cluster directory}" ;;
  resume) resume "${2:?the cluster directory}" ;;
  *) echo "usage: $0 start | stop DIR | pause DIR | resume DIR" >&2; exit 2 ;;
esac

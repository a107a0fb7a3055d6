#!/usr/bin/env bash
# Starts a throwaway PostgreSQL cluster for the tests and benchmarks: a fresh temp dir, the
# server on 127.0.0.1 at a free port (and a Unix socket in that dir), trust auth for the role
# `slotpool` and its database `slotpool`, max_connections 300, fsync off (nothing here is kept).
#
#   bench/postgres/start.sh [--state DIR]     start (or find the running one)
#   bench/postgres/stop.sh  [--state DIR]     stop it and remove its temp dir
#
# Prints one line on stdout, `SLOTPOOL_PG=host=127.0.0.1 port=N user=slotpool dbname=slotpool`
# (a tokio-postgres / libpq connection string after the first `=`), and writes DIR/env for
# `source` (exports SLOTPOOL_PG, and SLOTPOOL_PG_SOCKET for the Unix socket). Everything else
# goes to stderr. Idempotent: with a server of DIR already up it prints its settings again; a
# stale DIR (its server gone) is cleaned up and a new cluster started.
#
# DIR: --state, else $SLOTPOOL_PG_STATE, else target/postgres of the workspace; clusters with
# different DIRs are independent. The binaries: $PG_BIN, else the newest
# /usr/lib/postgresql/*/bin. Run as root, the server runs as the `postgres` user.
#
# Exit status: 0 running; 2 no server binaries (or no user to run them as): nothing started;
# 1 anything else (the server log's tail is printed).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

pg_usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

ROLE=slotpool
DATABASE=slotpool
MAX_CONNECTIONS=300

pg_parse_args "$@"
pg_require_bin
mkdir -p "$state"
exec 9>"$state/lock"
flock 9

if [ -f "$state/cluster" ]; then
  cluster=$(cat "$state/cluster")
  if [ -f "$state/env" ] && [ -d "$cluster/data" ] &&
    pg_as_owner "$bin/pg_ctl" status -D "$cluster/data" >/dev/null 2>&1; then
    . "$state/env"
    pg_say "already running in $cluster"
    printf 'SLOTPOOL_PG=%s\n' "$SLOTPOOL_PG"
    exit 0
  fi
  pg_say "the cluster recorded in $state is not running: removing it, starting a new one"
  pg_remove_cluster "$state" "$cluster"
fi

cluster=$(mktemp -d "${TMPDIR:-/tmp}/slotpool-pg.XXXXXX")
printf '%s\n' "$cluster" >"$state/cluster"
started=false
on_exit() {
  local code=$?
  if [ "$code" -ne 0 ]; then
    for log in "$cluster/initdb.log" "$cluster/server.log"; do
      [ -s "$log" ] && { pg_say "last lines of $log:"; tail -n 20 "$log" >&2; }
    done
    if $started; then
      pg_as_owner "$bin/pg_ctl" stop -D "$cluster/data" -m immediate -w >/dev/null 2>&1 || true
    fi
    pg_remove_cluster "$state" "$cluster"
  fi
}
trap on_exit EXIT
chmod 700 "$cluster"
[ "$(id -u)" -ne 0 ] || chown postgres: "$cluster"

pg_as_owner "$bin/initdb" -D "$cluster/data" --username="$ROLE" --auth=trust \
  --encoding=UTF8 --locale=C --no-sync >"$cluster/initdb.log" 2>&1 ||
  pg_die 1 "initdb failed"
cat >>"$cluster/data/postgresql.conf" <<CONF

# bench/postgres/start.sh: a throwaway cluster for tests and benchmarks.
listen_addresses = '127.0.0.1'
unix_socket_directories = '$cluster'
max_connections = $MAX_CONNECTIONS
fsync = off
synchronous_commit = off
full_page_writes = off
CONF

# A free port: one nothing answers on; if another process binds it first, try the next.
port=
for _ in $(seq 1 20); do
  candidate=$((20000 + RANDOM % 40000))
  if (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then
    continue
  fi
  if pg_as_owner "$bin/pg_ctl" start -D "$cluster/data" -l "$cluster/server.log" -w -t 60 \
    -o "-p $candidate" >/dev/null 2>&1; then
    port=$candidate
    started=true
    break
  fi
  grep -qiE 'could not (bind|create listen)|address already in use' "$cluster/server.log" 2>/dev/null ||
    pg_die 1 "the server did not start"
done
[ -n "$port" ] || pg_die 1 "found no free port in 20 tries"

if [ -x "$bin/createdb" ]; then
  pg_as_owner "$bin/createdb" -h "$cluster" -p "$port" -U "$ROLE" "$DATABASE" ||
    pg_die 1 "createdb $DATABASE failed"
  dbname=$DATABASE
else
  dbname=postgres
fi

settings="host=127.0.0.1 port=$port user=$ROLE dbname=$dbname"
cat >"$state/env" <<ENV
# Written by bench/postgres/start.sh, removed by stop.sh. For \`source\`.
export SLOTPOOL_PG='$settings'
export SLOTPOOL_PG_SOCKET='host=$cluster port=$port user=$ROLE dbname=$dbname'
ENV
pg_say "started PostgreSQL ($("$bin/postgres" --version)) in $cluster on 127.0.0.1:$port"
printf 'SLOTPOOL_PG=%s\n' "$settings"

#!/usr/bin/env bash
# Stops the throwaway cluster that bench/postgres/start.sh started and removes its temp dir
# and state files. Idempotent: with nothing recorded it says so and succeeds.
#
#   bench/postgres/stop.sh [--state DIR]     (the same DIR as start.sh's; see there)
#
# Exit status: 0 stopped (or nothing to stop); 1 the server would not stop (its dir is kept).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

pg_usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

pg_parse_args "$@"
if [ ! -f "$state/cluster" ]; then
  pg_say "no cluster recorded in $state: nothing to stop"
  exit 0
fi
exec 9>"$state/lock"
flock 9
[ -f "$state/cluster" ] || exit 0
cluster=$(cat "$state/cluster")

if [ -f "$cluster/data/postmaster.pid" ]; then
  if pg_find_bin; then
    pg_as_owner "$bin/pg_ctl" stop -D "$cluster/data" -m fast -w -t 60 >/dev/null 2>&1 || true
  else
    # No pg_ctl to ask: SIGINT is the server's "fast shutdown".
    kill -INT "$(head -n 1 "$cluster/data/postmaster.pid")" 2>/dev/null || true
    for _ in $(seq 1 600); do
      [ -f "$cluster/data/postmaster.pid" ] || break
      sleep 0.1
    done
  fi
  if [ -f "$cluster/data/postmaster.pid" ] &&
    kill -0 "$(head -n 1 "$cluster/data/postmaster.pid")" 2>/dev/null; then
    pg_die 1 "the server in $cluster did not stop; its directory is kept"
  fi
fi
pg_remove_cluster "$state" "$cluster"
pg_say "stopped; removed $cluster"

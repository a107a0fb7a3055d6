#!/usr/bin/env bash
# Stops, starts or restarts the server of a cluster that bench/postgres/start.sh made, in
# place: the same data directory, the same port, the state files kept. For the fault bench
# (`slotpool-bench --faults`) and its tests, which take the server away under load and bring
# it back where the pools look for it.
#
#   bench/postgres/ctl.sh stop-server  [--state DIR]   fast shutdown (backends terminated); the
#                                                      cluster stays, ready for start-server
#   bench/postgres/ctl.sh start-server [--state DIR]   start it again on its port, wait until
#                                                      it accepts connections
#   bench/postgres/ctl.sh restart      [--state DIR]   both, as one `pg_ctl restart`
#
# DIR is start.sh's (see there). stop.sh still removes the cluster, running or not; start.sh,
# finding it stopped, would replace it with a new one on another port, so use start-server to
# bring back a stopped one.
#
# Exit status: 0 done; 1 no cluster in DIR, or pg_ctl failed (the server log's tail is
# printed); 2 no server binaries.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

pg_usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

[ $# -ge 1 ] || pg_die 1 "needs stop-server, start-server or restart (try --help)"
action=$1
case $action in
  stop-server|start-server|restart) shift ;;
  -h|--help) pg_usage; exit 0 ;;
  *) pg_die 1 "unknown action \`$action\` (try --help)" ;;
esac
pg_parse_args "$@"
pg_require_bin
[ -f "$state/cluster" ] && [ -f "$state/env" ] || pg_die 1 "no cluster recorded in $state"
exec 9>"$state/lock"
flock 9
cluster=$(cat "$state/cluster")
[ -d "$cluster/data" ] || pg_die 1 "$cluster has no data directory"
port=$(sed -n "s/^export SLOTPOOL_PG='.*port=\([0-9]*\).*'$/\1/p" "$state/env")
[ -n "$port" ] || pg_die 1 "no port in $state/env"

failed() {
  [ -s "$cluster/server.log" ] && { pg_say "last lines of $cluster/server.log:"; tail -n 20 "$cluster/server.log" >&2; }
  pg_die 1 "$*"
}

case $action in
  stop-server)
    pg_as_owner "$bin/pg_ctl" stop -D "$cluster/data" -m fast -w -t 60 >/dev/null 2>&1 ||
      failed "pg_ctl stop failed"
    ;;
  start-server)
    pg_as_owner "$bin/pg_ctl" start -D "$cluster/data" -l "$cluster/server.log" -w -t 60 \
      -o "-p $port" >/dev/null 2>&1 || failed "pg_ctl start failed"
    ;;
  restart)
    pg_as_owner "$bin/pg_ctl" restart -D "$cluster/data" -l "$cluster/server.log" -m fast \
      -w -t 60 -o "-p $port" >/dev/null 2>&1 || failed "pg_ctl restart failed"
    ;;
esac
pg_say "$action: done ($cluster, port $port)"

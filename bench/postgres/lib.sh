# Shared by start.sh and stop.sh: where the state of the throwaway cluster lives, where the
# server binaries are, and how to run them as an unprivileged user. Sourced, not run.

# Reads the arguments into `state`, the state directory: `--state DIR`, else
# $SLOTPOOL_PG_STATE, else target/postgres of the workspace. It holds `env` (the connection
# settings, for `source`), `cluster` (the path of the cluster's temp dir) and `lock`. Two state
# directories are two independent clusters.
pg_parse_args() {
  state=${SLOTPOOL_PG_STATE:-}
  while [ $# -gt 0 ]; do
    case $1 in
      --state) [ $# -ge 2 ] || pg_die 1 "--state needs a directory"; state=$2; shift 2 ;;
      -h|--help) pg_usage; exit 0 ;;
      *) pg_die 1 "unknown argument \`$1\` (try --help)" ;;
    esac
  done
  if [ -z "$state" ]; then
    state="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/target/postgres"
  fi
}

pg_die() {
  local code=$1
  shift
  printf '%s: %s\n' "$(basename "$0")" "$*" >&2
  exit "$code"
}

pg_say() {
  printf '%s: %s\n' "$(basename "$0")" "$*" >&2
}

# Sets `bin`, the directory holding initdb, pg_ctl and postgres: $PG_BIN if set, else the
# newest /usr/lib/postgresql/*/bin that has all three. Returns 2 with `bin` empty when there is
# none (the message in `bin_missing`).
pg_find_bin() {
  local dir tool
  bin=
  if [ -n "${PG_BIN:-}" ]; then
    for tool in initdb pg_ctl postgres; do
      if [ ! -x "$PG_BIN/$tool" ]; then
        bin_missing="PG_BIN=$PG_BIN has no executable $tool"
        return 2
      fi
    done
    bin=$PG_BIN
    return 0
  fi
  for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5,5 -n -r); do
    if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && [ -x "$dir/postgres" ]; then
      bin=$dir
      return 0
    fi
  done
  bin_missing="no PostgreSQL server binaries: no /usr/lib/postgresql/*/bin with initdb, pg_ctl and postgres (install the Debian package \`postgresql\`, or set PG_BIN to a directory that has them)"
  return 2
}

# As pg_find_bin, but exits 2 with the message when there are no binaries.
pg_require_bin() {
  pg_find_bin || pg_die 2 "$bin_missing"
}

# Runs a command as the cluster's owner: the `postgres` user when we are root (the server
# refuses to run as root), else ourselves. The command runs in / so that the owner need not
# be able to read the caller's working directory, and without fd 9 (the state dir's lock):
# the server it starts lives on and must not hold that lock.
pg_as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 ||
      pg_die 2 "running as root, but there is no \`postgres\` user to own the cluster"
    (cd / && runuser -u postgres -- "$@" 9>&-)
  else
    (cd / && "$@" 9>&-)
  fi
}

# Removes a cluster's temp dir (only one that start.sh made: named slotpool-pg.*) and the
# state files that point at it.
pg_remove_cluster() {
  local state=$1 cluster=$2
  case $(basename "$cluster") in
    slotpool-pg.*) rm -rf -- "$cluster" ;;
    *) pg_say "not removing $cluster: not a directory start.sh made" ;;
  esac
  rm -f -- "$state/env" "$state/cluster"
}

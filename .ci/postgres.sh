#!/usr/bin/env bash
# Installs PostgreSQL from Debian's packages (if needed) and starts it on 127.0.0.1:5432
# with user postgres / password postgres. Idempotent; safe on a machine that already has it.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
if ! command -v pg_ctlcluster >/dev/null 2>&1 || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  apt-get update -qq
  apt-get install -y -qq postgresql >/dev/null
fi
PGVER=$(ls /usr/lib/postgresql | sort -n | tail -n 1)
if ! pg_lsclusters -h | awk '{print $1" "$2}' | grep -qx "$PGVER main"; then
  pg_createcluster "$PGVER" main
fi
if ! pg_lsclusters -h | awk -v v="$PGVER" '$1==v && $2=="main" {print $4}' | grep -qx online; then
  pg_ctlcluster "$PGVER" main start
fi
su postgres -c "psql -qc \"ALTER SYSTEM SET listen_addresses = '127.0.0.1'\""
su postgres -c "psql -qc \"ALTER SYSTEM SET max_connections = 300\""
su postgres -c "psql -qc \"ALTER USER postgres PASSWORD 'postgres'\""
pg_ctlcluster "$PGVER" main restart
for _ in $(seq 1 30); do
  if PGPASSWORD=postgres psql -h 127.0.0.1 -U postgres -qtAc 'select 1' postgres >/dev/null 2>&1; then
    echo "PostgreSQL $PGVER is up on 127.0.0.1:5432"
    exit 0
  fi
  sleep 1
done
echo "PostgreSQL did not come up" >&2
exit 1

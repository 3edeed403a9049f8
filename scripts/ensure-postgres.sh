#!/usr/bin/env bash
# The PostgreSQL tests start their own server: they need initdb and pg_ctl (PostgreSQL
# 11+; 15 here). Install PostgreSQL 15 server + contrib with apt when they are missing.
set -euo pipefail
find_bindir() {
  for d in ${DELTAMV_PG_BINDIR:-} /usr/lib/postgresql/15/bin $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -rV); do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; return 0; fi
  done
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(command -v initdb)"; return 0
  fi
  return 1
}
if bindir=$(find_bindir); then
  echo "PostgreSQL server binaries: $bindir ($("$bindir/pg_ctl" --version))"
  exit 0
fi
echo "PostgreSQL server binaries not found; installing postgresql-15 with apt-get" >&2
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
$SUDO apt-get update -q >&2
if ! $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql-15 postgresql-contrib >&2; then
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql postgresql-contrib >&2
fi
bindir=$(find_bindir)
echo "PostgreSQL server binaries: $bindir ($("$bindir/pg_ctl" --version))"

#!/usr/bin/env bash
# Install the server binaries that the test suite starts itself (throwaway PostgreSQL,
# PgBouncer, MariaDB, Redis and Prometheus instances on free loopback ports; see
# ratchet/testing/servers.py), Chromium for the dashboard's browser tests, and what building
# mysqlclient (the optional C MySQL driver,
# part of the development install) needs: MariaDB's client library headers, pkg-config and
# a C compiler. Idempotent: installs only what is missing, from Debian's packages, and never
# starts, stops or reconfigures the system-wide services -- the tests do not use them. Run as
# root (or with sudo) on Debian 12, before `uv sync` (dev.py does).
set -euo pipefail

log() { printf 'install-test-services: %s\n' "$*"; }

have_postgres() {
    local dir
    for dir in /usr/lib/postgresql/*/bin; do
        if [[ -x "$dir/postgres" && -x "$dir/initdb" && -x "$dir/pg_isready" ]] \
            && command -v psql >/dev/null 2>&1; then
            return 0
        fi
    done
    return 1
}

have() {
    local name
    for name in "$@"; do
        command -v "$name" >/dev/null 2>&1 || [[ -x "/usr/sbin/$name" ]] || return 1
    done
}

missing=()
if have_postgres; then
    log "PostgreSQL server binaries present ($(ls -d /usr/lib/postgresql/*/bin | tr '\n' ' '))"
else
    missing+=(postgresql)
fi
if have mariadbd mariadb-install-db mariadb-admin mariadb; then
    log "MariaDB server binaries present"
else
    missing+=(mariadb-server)
fi
if have redis-server redis-cli; then
    log "Redis server binaries present"
else
    missing+=(redis-server)
fi

if have pgbouncer; then
    log "PgBouncer binary present"
else
    missing+=(pgbouncer)
fi

if have prometheus; then
    log "Prometheus server binary present"
else
    missing+=(prometheus)
fi

# The dashboard's browser tests drive Debian's headless Chromium through Playwright (which never
# downloads a browser of its own).
if [[ -x /usr/bin/chromium ]]; then
    log "Chromium present"
else
    missing+=(chromium)
fi

have_mysqlclient_build_deps() {
    have pkg-config gcc && pkg-config --exists mariadb 2>/dev/null
}
if have_mysqlclient_build_deps; then
    log "mysqlclient build dependencies present (libmariadb-dev, pkg-config, gcc)"
else
    missing+=(libmariadb-dev pkg-config gcc libc6-dev)
fi

# Building a C extension also needs the headers of the Python it is built for; Debian's own
# Python keeps them in a separate package (pyenv and uv-managed Pythons ship them).
have_python_headers() {
    local py=${RATCHET_PYTHON:-python3}
    "$py" -c 'import os, sys, sysconfig
sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)'
}
if have_python_headers; then
    log "Python headers present"
elif [[ "$(command -v "${RATCHET_PYTHON:-python3}")" == /usr/bin/* ]]; then
    missing+=(python3-dev)
else
    log "warning: no Python.h for ${RATCHET_PYTHON:-python3}; building mysqlclient may fail" >&2
fi

if ((${#missing[@]} == 0)); then
    log "nothing to install"
    exit 0
fi

if [[ "$(id -u)" -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
        log "not root: re-running with sudo"
        exec sudo bash "$0" "$@"
    fi
    log "missing packages (${missing[*]}) and not root: run this script as root" >&2
    exit 1
fi

# Keep the packages' maintainer scripts from starting the system services during the
# install: the tests start their own servers, and in containers without an init system a
# service start would fail the install. Only if no policy is in place already.
policy=/usr/sbin/policy-rc.d
if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\n# temporary, from install-test-services.sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    trap 'rm -f "$policy"' EXIT
    log "temporarily blocking service starts during the install ($policy)"
fi

log "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends "${missing[@]}"

if have_postgres && have mariadbd mariadb-install-db mariadb-admin mariadb \
    && have redis-server redis-cli && have pgbouncer && have prometheus \
    && [[ -x /usr/bin/chromium ]] && have_mysqlclient_build_deps; then
    log "done: ${missing[*]} installed; the system services are not needed by the tests" \
        "(they start their own servers on free ports)"
else
    log "install finished but some binaries are still missing" >&2
    exit 1
fi

#!/usr/bin/env bash
# Install the system packages segfactory needs and make sure dockerd answers.
# Idempotent: does nothing that is already done. As root it installs with apt; otherwise it
# prints exactly what to install and carries on (the bwrap backend and most tests still run).
set -uo pipefail

PACKAGES=(docker.io bubblewrap docker-compose inotify-tools chromium chromium-driver)

missing=()
for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done

if ((${#missing[@]})); then
    if [[ $(id -u) -eq 0 ]]; then
        echo "setup: installing ${missing[*]} with apt"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
            || { echo "setup: apt-get install ${missing[*]} failed" >&2; exit 1; }
    else
        echo "setup: missing system packages; as root run:"
        echo "    apt-get install -y ${missing[*]}"
    fi
fi

if command -v docker >/dev/null && ! docker info >/dev/null 2>&1; then
    if [[ $(id -u) -eq 0 ]] && command -v dockerd >/dev/null; then
        echo "setup: starting dockerd (log: /var/log/segfactory-dockerd.log)"
        nohup dockerd >/var/log/segfactory-dockerd.log 2>&1 &
        for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
        docker info >/dev/null 2>&1 || { echo "setup: dockerd did not answer in 30 s; see /var/log/segfactory-dockerd.log" >&2; exit 1; }
    else
        echo "setup: the Docker engine does not answer; start it with 'sudo dockerd &' or use --backend bwrap"
    fi
fi
exit 0

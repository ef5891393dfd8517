#!/usr/bin/env bash
# Start a local Docker engine if none answers, and wait (max 60 s) until
# `docker info` works. The machines ship only the client; the engine comes
# from Debian's docker.io package.
#
# usage: ci/start-docker.sh        exit 0 when an engine answers
set -euo pipefail

LOG="${DOCKERD_LOG:-/var/log/dockerd.log}"
TIMEOUT="${DOCKERD_WAIT_S:-60}"

if docker info >/dev/null 2>&1; then
    echo "start-docker: engine already answering at ${DOCKER_HOST:-unix:///var/run/docker.sock}" >&2
    exit 0
fi
if [ -n "${DOCKER_HOST:-}" ] && [ "${DOCKER_HOST}" != "unix:///var/run/docker.sock" ]; then
    echo "start-docker: DOCKER_HOST=$DOCKER_HOST does not answer; not starting a local engine for a remote host" >&2
    exit 1
fi
command -v dockerd >/dev/null || {
    echo "start-docker: dockerd not installed (apt-get install -y docker.io)" >&2
    exit 1
}
[ "$(id -u)" = 0 ] || { echo "start-docker: dockerd needs root" >&2; exit 1; }

echo "start-docker: starting dockerd (log: $LOG)" >&2
# setsid: the engine must outlive this script and the CI step's process group.
(setsid dockerd >"$LOG" 2>&1 &)

for _ in $(seq 1 "$TIMEOUT"); do
    if docker info >/dev/null 2>&1; then
        echo "start-docker: engine is up ($(docker version --format '{{.Server.Version}}' 2>/dev/null))" >&2
        exit 0
    fi
    sleep 1
done
echo "start-docker: engine did not answer within ${TIMEOUT}s; last lines of $LOG:" >&2
tail -n 20 "$LOG" >&2 || true
exit 1

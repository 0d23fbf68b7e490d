#!/usr/bin/env bash
# Drover's main job on embedded defaults: installs what is missing, builds, and runs `drover demo`
# (a registry, an agent, a gateway and sample servers on loopback; the five incidents replayed;
# a report; then the dashboard until Ctrl-C). Flags go to `drover demo` (--exit, --report FILE).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
scripts/build.sh build -- drover
exec build/src/cli/drover demo "$@"

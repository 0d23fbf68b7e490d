#!/usr/bin/env bash
# Drover's main job on embedded defaults: installs what is missing, builds, and runs it.
# Until the registry and gateway land, the main job is the router evaluation.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
scripts/build.sh build -- drover
exec build/src/cli/drover bench router "$@"

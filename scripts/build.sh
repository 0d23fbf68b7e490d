#!/usr/bin/env bash
# Configures (once) and builds Drover with CMake + Ninja.
#   scripts/build.sh [BUILD_DIR] [extra cmake -D options...] [-- ninja targets...]
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${1:-build}
shift || true
cmake_args=()
targets=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then
    shift
    targets=("$@")
    break
  fi
  cmake_args+=("$1")
  shift
done

cmake -S . -B "$build_dir" -G Ninja "${cmake_args[@]}" >/dev/null
ninja -C "$build_dir" "${targets[@]}"

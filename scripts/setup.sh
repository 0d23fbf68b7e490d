#!/usr/bin/env bash
# Installs the Debian 12 packages Drover needs to build and test, when any are missing.
# Idempotent: does nothing when everything is present. Works as root or through sudo.
set -euo pipefail

packages=(
  # toolchain
  g++ cmake ninja-build pkg-config ccache git
  # libraries
  libcli11-dev libspdlog-dev libfmt-dev libxxhash-dev nlohmann-json3-dev libsqlite3-dev
  libboost1.74-dev libboost-system1.74-dev libyaml-cpp-dev curl
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libhiredis-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev openssl
  # peers the benchmarks (and the etcd store) run against; their own services stay unused
  etcd-server haproxy nginx libnginx-mod-stream wrk redis-server
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  as_root=(env DEBIAN_FRONTEND=noninteractive)
elif command -v sudo >/dev/null 2>&1; then
  # sudo resets the environment, so the variable goes through env; in a terminal sudo may ask
  # for a password, elsewhere (CI) it must not hang waiting for one.
  if [ -t 0 ]; then
    as_root=(sudo env DEBIAN_FRONTEND=noninteractive)
  else
    as_root=(sudo -n env DEBIAN_FRONTEND=noninteractive)
  fi
else
  echo "setup: missing packages (${missing[*]}): run as root or install sudo" >&2
  exit 1
fi

echo "setup: installing ${missing[*]}" >&2
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

#!/usr/bin/env bash
# Installs the Debian 12 packages Drover needs to build and test, when any are missing, and the
# dashboard test's npm packages (tests/ui, from its package-lock.json) when they are missing or
# older than the lock file. Idempotent: does nothing when everything is present. Works as root or
# through sudo.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  # toolchain
  g++ cmake ninja-build pkg-config ccache git
  # fuzzing (scripts/fuzz.sh): clang and its libFuzzer runtime
  clang libclang-rt-14-dev
  # libraries
  libcli11-dev libspdlog-dev libfmt-dev libxxhash-dev nlohmann-json3-dev libsqlite3-dev
  libboost1.74-dev libboost-system1.74-dev libyaml-cpp-dev curl
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libhiredis-dev
  # the registry's gRPC server: HTTP/2 from nghttp2
  libnghttp2-dev
  # the drover binary's allocator
  libmimalloc-dev
  # tests and benchmarks (registry_bench's HTTP watchers read through io_uring)
  libgtest-dev libgmock-dev libbenchmark-dev openssl liburing-dev
  # the clock-jump test moves the wall clock of its children (LD_PRELOAD); the address test
  # makes an interface in a network namespace of its own (ip)
  libfaketime iproute2
  # peers the benchmarks (and the etcd store) run against; their own services stay unused
  etcd-server haproxy nginx libnginx-mod-stream wrk redis-server
  # the registry's DNS answers (ldns encodes and decodes them); the real clients of the SDK-less
  # recipes: dig, Prometheus (http_sd), Python's gRPC (xDS)
  libldns-dev bind9-dnsutils prometheus python3-grpcio
  # the dashboard test's browser
  chromium
)
# Node for the dashboard test: Debian's, unless a node (and its npm) is there already.
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
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
fi

# playwright-core for the dashboard test, exactly as locked. npm writes
# node_modules/.package-lock.json on every install, so a lock file newer than it means the
# packages are stale. A failure here leaves the rest of the suite usable: the dashboard test then
# fails, saying what is missing.
ui=tests/ui
if [ ! -f "$ui/node_modules/.package-lock.json" ] ||
   [ "$ui/package-lock.json" -nt "$ui/node_modules/.package-lock.json" ]; then
  echo "setup: npm ci in $ui" >&2
  if ! (cd "$ui" && npm ci --no-audit --no-fund --loglevel=error >/dev/null); then
    echo "setup: npm ci in $ui failed; the dashboard test will fail until it succeeds" >&2
  fi
fi

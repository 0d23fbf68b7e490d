#!/usr/bin/env bash
# Drover's whole test suite: installs what is missing, builds with warnings as errors, runs every
# test, then runs the unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer and
# the concurrency tests under ThreadSanitizer, and fuzzes every parser for a short time.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
jobs=$(nproc)

echo "== build (build/)"
scripts/build.sh build -DDROVER_WERROR=ON
echo "== tests"
ctest --test-dir build --output-on-failure -j"$jobs"

# The registry's HTTP server is left out: Asio's handler fences are not modelled by GCC's TSan
# (-Wtsan), so its reports there would not be trustworthy.
echo "== ThreadSanitizer build (build-tsan/): the parts with concurrent readers and writers"
tsan_tests=(common_test router_test sdk_core_test jobs_test)
scripts/build.sh build-tsan -DDROVER_WERROR=ON -DDROVER_SANITIZE=thread -DDROVER_BUILD_BENCH=OFF \
  -- "${tsan_tests[@]}"
# GCC 12's TSan cannot map its shadow memory under high ASLR entropy (vm.mmap_rnd_bits > 28,
# common on newer hosts); running without address randomisation avoids that.
for t in "${tsan_tests[@]}"; do
  TSAN_OPTIONS="halt_on_error=1" setarch "$(uname -m)" -R "build-tsan/tests/$t" --gtest_brief=1
done

echo "== AddressSanitizer + UBSan build (build-asan/): unit tests"
asan_targets=(drover common_test router_test cli_test registry_test sdk_core_test sdk_test gateway_test rollout_test jobs_test grpc_test
  registry_request_fuzz gateway_http_fuzz key_line_fuzz config_fuzz jobs_payload_fuzz watch_decoder_fuzz
  cli_config_fuzz)
# -O0: the sanitizer build hunts bugs, not speed; instrumented Asio/gRPC code compiles about twice
# as fast at -O0 as at -O1 (measured on gateway/tcp_proxy.cc: 19 s vs 36 s), while its unit
# tests take about a minute instead of 40 s.
scripts/build.sh build-asan -DDROVER_WERROR=ON -DDROVER_SANITIZE=address,undefined \
  -DDROVER_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -g -DNDEBUG" \
  -- "${asan_targets[@]}"
ctest --test-dir build-asan --output-on-failure -j"$jobs" -L unit

echo "== fuzzing: every parser for 20 s (scripts/fuzz.sh; corpora replayed above as tests)"
scripts/fuzz.sh 20

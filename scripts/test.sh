#!/usr/bin/env bash
# Drover's whole test suite: installs what is missing, builds with warnings as errors and runs
# every test; installs the SDK and builds an example against it out of tree; runs the
# concurrency tests under ThreadSanitizer; then, in one clang tree, checks every part's
# thread-safety annotations (-Wthread-safety -Werror), runs the unit tests under AddressSanitizer
# + UndefinedBehaviorSanitizer and fuzzes every parser for a short time.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
started=$SECONDS
step() { echo "== $1 (at $((SECONDS - started)) s)"; }

step "build (build/)"
scripts/build.sh build -DDROVER_WERROR=ON
step "tests"
# Most tests wait on sockets, child processes and timers rather than the CPU: four at once keep
# two cores busy without starving the timing-bound ones.
ctest --test-dir build --output-on-failure -j4

step "the SDK installed, and examples/zone_server built against it out of tree"
rm -rf build/sdk build/example-zone
cmake --install build --prefix build/sdk >/dev/null
cmake -S examples/zone_server -B build/example-zone -G Ninja -DCMAKE_PREFIX_PATH="$PWD/build/sdk" \
  >/dev/null
ninja -C build/example-zone
build/example-zone/zone_server --help >/dev/null

step "ThreadSanitizer build (build-tsan/): the parts with concurrent readers and writers"
# The Asio servers are left out: GCC's TSan does not model Asio's handler fences (-Wtsan), so its
# reports there would not be trustworthy; they run under ASan below.
tsan_tests=(common_test router_test sdk_core_test jobs_test)
# -O1 (TSan's advice, and a cold build of this tree in 95 s rather than 114 s at -O2).
scripts/build.sh build-tsan -DDROVER_WERROR=ON -DDROVER_SANITIZE=thread -DDROVER_BUILD_BENCH=OFF \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -- "${tsan_tests[@]}"
# GCC 12's TSan cannot map its shadow memory under high ASLR entropy (vm.mmap_rnd_bits > 28,
# common on newer hosts); running without address randomisation avoids that.
for t in "${tsan_tests[@]}"; do
  TSAN_OPTIONS="halt_on_error=1" setarch "$(uname -m)" -R "build-tsan/tests/$t" --gtest_brief=1
done

step "clang build (build-clang/): -Wthread-safety, ASan + UBSan, libFuzzer"
# scripts/clang_tree.sh builds every part (the drover binary links them all) with the thread
# safety analysis as an error, plus the unit tests and the fuzz targets.
scripts/clang_tree.sh
step "unit tests under ASan + UBSan"
ctest --test-dir build-clang --output-on-failure -j2 -L unit

step "fuzzing: every parser for 20 s (scripts/fuzz.sh; corpora replayed above as tests)"
scripts/fuzz.sh 20
step "done"

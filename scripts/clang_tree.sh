#!/usr/bin/env bash
# Configures and builds build-clang/, Drover's clang tree:
#   - every part compiled with clang's thread safety analysis as an error (-Wthread-safety
#     -Werror checks the DROVER_GUARDED_BY / DROVER_REQUIRES annotations); the drover binary
#     links every part, so building it checks them all;
#   - AddressSanitizer + UndefinedBehaviorSanitizer, and libFuzzer's coverage instrumentation;
#   - the unit tests (ctest --test-dir build-clang -L unit) and the fuzz targets (scripts/fuzz.sh),
#     which in this tree also replay their corpora as tests.
#   scripts/clang_tree.sh [ninja targets...]      (default: all of the above)
set -euo pipefail
cd "$(dirname "$0")/.."

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(drover common_test net_test router_test cli_test registry_test sdk_core_test sdk_test
           jobs_test grpc_test gateway_test rollout_test
           registry_request_fuzz gateway_http_fuzz key_line_fuzz config_fuzz jobs_payload_fuzz
           watch_decoder_fuzz cli_config_fuzz dns_query_fuzz xds_request_fuzz grpc_server_fuzz)
fi
# -O0: instrumented for ASan, UBSan and coverage, the coroutine-heavy parts cost clang most of
# their time in optimization and code generation at -O1; the tree builds in about 60% of the
# time, its tests and fuzz targets run slower (figures: docs/ARCHITECTURE.md, the test command's
# steps). Give the tree other flags with DROVER_CLANG_FLAGS (e.g. "-O1 -g1 -DNDEBUG" for a long
# fuzzing run).
CC=clang CXX=clang++ scripts/build.sh build-clang -DDROVER_WERROR=ON -DDROVER_FUZZ=ON \
  -DDROVER_SANITIZE=fuzzer-no-link,address,undefined -DDROVER_BUILD_BENCH=OFF \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="${DROVER_CLANG_FLAGS:-"-O0 -g1 -DNDEBUG"}" -- "${targets[@]}"

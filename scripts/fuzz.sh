#!/usr/bin/env bash
# Fuzzes every parser with libFuzzer for a bounded time each (default 30 s; CI gives 20):
#   scripts/fuzz.sh [SECONDS] [TARGET...]
# Builds the targets of tests/fuzz in the clang tree (build-clang/, scripts/clang_tree.sh:
# -fsanitize=fuzzer,address,undefined), starts each from its corpus (tests/fuzz/corpus/<target>;
# new inputs go to build-clang/fuzz/corpus/<target>), two at a time. A crash, leak or timeout
# fails the run and leaves the input in build-clang/fuzz/artifacts/: add it to the target's
# corpus, where the regular test suite replays it (ctest -L fuzz), and fix the parser.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-30}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(registry_request_fuzz gateway_http_fuzz key_line_fuzz config_fuzz jobs_payload_fuzz
           watch_decoder_fuzz cli_config_fuzz dns_query_fuzz xds_request_fuzz grpc_server_fuzz)
fi

scripts/setup.sh
echo "== fuzz build (build-clang/)"
scripts/clang_tree.sh "${targets[@]}"

out=build-clang/fuzz
mkdir -p "$out/artifacts"
run() {
  local t=$1
  mkdir -p "$out/corpus/$t"
  # -timeout: one input may take at most 10 s; -rss_limit_mb: no input may blow up memory.
  if "build-clang/tests/fuzz/$t" "$out/corpus/$t" "tests/fuzz/corpus/$t" \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$out/artifacts/$t-" >"$out/$t.log" 2>&1; then
    echo "fuzz $t: ok, $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out/$t.log" |
      grep -o '[0-9]*$') runs in ${seconds} s, $(ls "$out/corpus/$t" | wc -l) new inputs"
  else
    echo "fuzz $t: FAILED; input in $out/artifacts/, log $out/$t.log:" >&2
    grep -E "^==[0-9]+==ERROR|runtime error|SUMMARY|Test unit written" "$out/$t.log" |
      head -5 >&2
    return 1
  fi
}

echo "== fuzzing ${#targets[@]} targets for ${seconds} s each"
failed=0
pids=()
for t in "${targets[@]}"; do
  run "$t" &
  pids+=($!)
  if [ ${#pids[@]} -ge 2 ]; then
    wait "${pids[0]}" || failed=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || failed=1; done
exit $failed

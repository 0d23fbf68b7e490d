// `drover bench router`: movement, balance and pick cost of the router's algorithms, measured in
// one run against the hash % n baseline (demo/evaluation.h).
#include <iostream>
#include <memory>

#include "commands.h"
#include "demo/evaluation_report.h"

namespace drover::cli {
namespace {

struct BenchRouterArgs {
  demo::EvaluationOptions options;
  bool json = false;
  bool quiet = false;
};

}  // namespace

void AddBenchCommands(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Measurement runs that print a report");
  bench->require_subcommand(1);

  auto args = std::make_shared<BenchRouterArgs>();
  CLI::App* router_cmd = bench->add_subcommand(
      "router",
      "Key movement on scale-out/in, load balance and pick cost of hash % n, ring hash, Maglev, "
      "bounded load and P2C, measured in one run");
  router_cmd->add_option("-n,--endpoints", args->options.endpoints, "Number of endpoints N")
      ->check(CLI::Range(2, 10000))
      ->capture_default_str();
  router_cmd->add_option("-k,--keys", args->options.keys, "Number of generated keys")
      ->check(CLI::Range(1000, 100'000'000))
      ->capture_default_str();
  router_cmd->add_option("--zipf-s", args->options.zipf_s, "Zipf exponent of the skewed stream")
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  router_cmd->add_option("-c,--bounded-c", args->options.bounded_c, "Bounded-load factor c")
      ->check(CLI::Range(1.0, 100.0))
      ->capture_default_str();
  router_cmd->add_option("--timing-picks", args->options.timing_picks, "Picks per timed run")
      ->check(CLI::Range(1000, 1'000'000'000))
      ->capture_default_str();
  router_cmd->add_option("--seed", args->options.seed, "Seed of the Zipf stream")
      ->capture_default_str();
  router_cmd->add_flag("--json", args->json, "Print one JSON object instead of the text report");
  router_cmd->add_flag("-q,--quiet", args->quiet, "No progress lines on stderr");
  router_cmd->callback([args] {
    auto progress = [args](std::string_view line) {
      if (!args->quiet) std::cerr << "bench router: " << line << '\n';
    };
    const demo::Evaluation ev = demo::EvaluateRouting(args->options, progress);
    if (args->json) {
      std::cout << demo::EvaluationJson(ev).dump(2) << '\n';
    } else {
      demo::PrintEvaluation(ev);
    }
  });
}

}  // namespace drover::cli

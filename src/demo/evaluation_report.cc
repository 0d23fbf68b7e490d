#include "demo/evaluation_report.h"

#include <cstdio>
#include <string>

namespace drover::demo {
namespace {

nlohmann::json MovementJson(const Movement& m) {
  nlohmann::json j = {{"add", m.add}, {"remove", m.remove}};
  if (m.add_exact >= 0) j["add_exact"] = m.add_exact;
  if (m.remove_exact >= 0) j["remove_exact"] = m.remove_exact;
  if (m.remove_exact_worst >= 0) j["remove_exact_worst"] = m.remove_exact_worst;
  return j;
}

}  // namespace

nlohmann::json EvaluationJson(const Evaluation& ev) {
  return {
      {"n", ev.n},
      {"keys", ev.keys},
      {"zipf_s", ev.zipf_s},
      {"bounded_c", ev.bounded_c},
      {"movement",
       {{"modn", MovementJson(ev.modn)},
        {"ring", MovementJson(ev.ring)},
        {"maglev", MovementJson(ev.maglev)},
        {"maglev_paper_size", MovementJson(ev.maglev_paper_size)}}},
      {"peak_to_mean",
       {{"ring_100", ev.ring_100_exact},
        {"ring_256", ev.ring_256_exact},
        {"maglev", ev.maglev_exact},
        {"bounded_uniform", ev.bounded_uniform},
        {"bounded_zipf", ev.bounded_zipf},
        {"ring_100_sampled", ev.ring_100_sampled},
        {"ring_256_sampled", ev.ring_256_sampled},
        {"maglev_sampled", ev.maglev_sampled},
        {"ring_zipf_unbounded", ev.ring_zipf},
        {"maglev_zipf_unbounded", ev.maglev_zipf},
        {"bounded_maglev_zipf", ev.bounded_maglev_zipf},
        {"ring_zipf_hot_keys_spread", ev.ring_zipf_spread}}},
      {"hot_keys_spread", ev.hot_keys_spread},
      {"pick_ns",
       {{"modn", ev.pick_ns_modn},
        {"ring", ev.pick_ns_ring},
        {"maglev", ev.pick_ns_maglev},
        {"bounded", ev.pick_ns_bounded},
        {"p2c", ev.pick_ns_p2c}}},
      {"pick_cost_vs_modn",
       {{"ring", ev.pick_ns_ring / ev.pick_ns_modn},
        {"maglev", ev.pick_ns_maglev / ev.pick_ns_modn},
        {"bounded", ev.pick_ns_bounded / ev.pick_ns_modn}}},
      {"build_ms", {{"ring", ev.build_ms_ring}, {"maglev", ev.build_ms_maglev}}},
  };
}

void PrintEvaluation(const Evaluation& ev) {
  std::printf("Router evaluation: N=%zu endpoints, %zu keys, Zipf s=%.2f, bounded load c=%.2f\n\n",
              ev.n, ev.keys, ev.zipf_s, ev.bounded_c);
  std::printf("Keys moved, as a multiple of the ideal (1.00 = only the keys that must move)\n");
  std::printf("  %-8s %12s %12s %12s %14s %14s\n", "", "add N+1", "remove 1", "add exact",
              "remove exact", "remove worst");
  auto row = [](const char* name, const Movement& m) {
    auto exact = [](double v) { return v < 0 ? std::string("-") : std::to_string(v).substr(0, 6); };
    std::printf("  %-8s %11.2fx %11.2fx %12s %14s %14s\n", name, m.add, m.remove,
                exact(m.add_exact).c_str(), exact(m.remove_exact).c_str(),
                exact(m.remove_exact_worst).c_str());
  };
  row("hash%n", ev.modn);
  row("ring", ev.ring);
  row("maglev", ev.maglev);
  row("maglev*", ev.maglev_paper_size);
  std::printf("  (maglev* = the Maglev paper's table size M >= 100 N, for comparison)\n");
  std::printf("\nPeak-to-mean load (1.00 = perfectly even)\n");
  std::printf("  ring, 100 vnodes      %6.3f exact  %6.3f over keys\n", ev.ring_100_exact,
              ev.ring_100_sampled);
  std::printf("  ring, 256 vnodes      %6.3f exact  %6.3f over keys\n", ev.ring_256_exact,
              ev.ring_256_sampled);
  std::printf("  maglev                %6.3f exact  %6.3f over keys\n", ev.maglev_exact,
              ev.maglev_sampled);
  std::printf("  zipf keys, no bound   %6.3f ring   %6.3f maglev\n", ev.ring_zipf, ev.maglev_zipf);
  std::printf("  bounded load (ring)   %6.3f uniform  %6.3f zipf   (cap c=%.2f)\n",
              ev.bounded_uniform, ev.bounded_zipf, ev.bounded_c);
  std::printf("  bounded load (maglev) %6.3f zipf\n", ev.bounded_maglev_zipf);
  std::printf(
      "  hot keys spread       %6.3f zipf reads, ring  (%zu keys over 0.5%% -> 8 sub-keys)\n",
      ev.ring_zipf_spread, ev.hot_keys_spread);
  std::printf("\nPick cost, key hash included (best of 3 runs)\n");
  std::printf("  hash%%n   %7.1f ns  (baseline)\n", ev.pick_ns_modn);
  std::printf("  ring     %7.1f ns  %5.2fx baseline\n", ev.pick_ns_ring,
              ev.pick_ns_ring / ev.pick_ns_modn);
  std::printf("  maglev   %7.1f ns  %5.2fx baseline\n", ev.pick_ns_maglev,
              ev.pick_ns_maglev / ev.pick_ns_modn);
  std::printf("  bounded  %7.1f ns  %5.2fx baseline\n", ev.pick_ns_bounded,
              ev.pick_ns_bounded / ev.pick_ns_modn);
  std::printf("  p2c      %7.1f ns  (no key)\n", ev.pick_ns_p2c);
  std::printf("\nBuild cost for N=%zu: ring %.2f ms, maglev %.2f ms\n", ev.n, ev.build_ms_ring,
              ev.build_ms_maglev);
}

}  // namespace drover::demo

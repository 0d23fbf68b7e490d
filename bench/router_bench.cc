// Pick and rebuild cost of the router's algorithms at N = 10, 100, 1000 endpoints, with hash % n
// as the in-run baseline. `router_bench --benchmark_filter=Maglev` runs one family.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "drover/router.h"

namespace drover::router {
namespace {

std::shared_ptr<const RoutingTable> MakeTable(std::size_t n) {
  std::vector<Endpoint> endpoints;
  for (std::size_t i = 0; i < n; ++i) {
    Endpoint e;
    e.id = "shard-" + std::to_string(i);
    e.address = "127.0.0.1:" + std::to_string(20000 + i);
    e.state = EndpointState::kReady;
    endpoints.push_back(std::move(e));
  }
  return RoutingTable::Create(1, std::move(endpoints)).value();
}

std::vector<std::string> MakeKeys() {
  std::vector<std::string> keys(1 << 16);
  for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = "player-" + std::to_string(i * 7919);
  return keys;
}

const std::vector<std::string>& Keys() {
  static const std::vector<std::string> keys = MakeKeys();
  return keys;
}

template <typename Picker>
void RunKeyPicks(benchmark::State& state, const Picker& picker) {
  const auto& keys = Keys();
  std::size_t i = 0;
  for (auto _ : state) {
    auto picked = picker.Pick(HashKey(keys[i++ & (keys.size() - 1)]));
    benchmark::DoNotOptimize(picked);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_ModNPick(benchmark::State& state) {
  auto table = MakeTable(state.range(0));
  RunKeyPicks(state, ModN::Build(*table));
}

void BM_RingPick(benchmark::State& state) {
  auto table = MakeTable(state.range(0));
  RunKeyPicks(state, RingHash::Build(*table));
}

void BM_MaglevPick(benchmark::State& state) {
  auto table = MakeTable(state.range(0));
  RunKeyPicks(state, Maglev::Build(*table));
}

void BM_BoundedRingPick(benchmark::State& state) {
  auto table = MakeTable(state.range(0));
  const RingHash ring = RingHash::Build(*table);
  const auto& keys = Keys();
  // Loads as after routing every key once, so most owners are under their cap.
  std::vector<std::uint64_t> loads(table->size(), 0);
  for (const auto& k : keys) ++loads[*ring.Pick(HashKey(k))];
  const LoadView view{loads, keys.size()};
  std::size_t i = 0;
  for (auto _ : state) {
    auto picked = ring.PickBounded(HashKey(keys[i++ & (keys.size() - 1)]), view);
    benchmark::DoNotOptimize(picked);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_P2cPick(benchmark::State& state) {
  auto table = MakeTable(state.range(0));
  const P2cPicker p2c = P2cPicker::Build(*table);
  std::vector<std::uint64_t> loads(table->size());
  Xoshiro256 random(7);
  for (auto& l : loads) l = random.Uniform(100);
  const MonoTime now = MonoClock::now();
  for (auto _ : state) {
    auto picked = p2c.Pick(loads, now, random);
    benchmark::DoNotOptimize(picked);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_RingBuild(benchmark::State& state) {
  auto table = MakeTable(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(RingHash::Build(*table));
}

void BM_MaglevBuild(benchmark::State& state) {
  auto table = MakeTable(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(Maglev::Build(*table));
}

void BM_RouterUpdate(benchmark::State& state) {
  Router router;
  auto table = MakeTable(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(router.Update(table->endpoints()));
}

// Snapshot load cost: Published<T> against libstdc++'s std::atomic<std::shared_ptr> as the peer,
// with one and two reader threads.
void BM_SnapshotLoadPublished(benchmark::State& state) {
  static Published<RoutingTable> cell(MakeTable(10));
  for (auto _ : state) benchmark::DoNotOptimize(cell.Load());
}

void BM_SnapshotLoadStdAtomic(benchmark::State& state) {
  static std::atomic<std::shared_ptr<const RoutingTable>> cell(MakeTable(10));
  for (auto _ : state) benchmark::DoNotOptimize(cell.load(std::memory_order_acquire));
}

void BM_SnapshotReaderCurrent(benchmark::State& state) {
  static Published<RoutingTable> cell(MakeTable(10));
  Published<RoutingTable>::Reader reader(cell);
  for (auto _ : state) benchmark::DoNotOptimize(reader.Current().get());
}

BENCHMARK(BM_SnapshotLoadPublished)->Threads(1)->Threads(2);
BENCHMARK(BM_SnapshotReaderCurrent)->Threads(1)->Threads(2);
BENCHMARK(BM_SnapshotLoadStdAtomic)->Threads(1)->Threads(2);
BENCHMARK(BM_ModNPick)->Arg(10)->Arg(100)->Arg(1000);
BENCHMARK(BM_RingPick)->Arg(10)->Arg(100)->Arg(1000);
BENCHMARK(BM_MaglevPick)->Arg(10)->Arg(100)->Arg(1000);
BENCHMARK(BM_BoundedRingPick)->Arg(10)->Arg(100)->Arg(1000);
BENCHMARK(BM_P2cPick)->Arg(10)->Arg(100)->Arg(1000);
BENCHMARK(BM_RingBuild)->Arg(10)->Arg(100)->Arg(1000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MaglevBuild)->Arg(10)->Arg(100)->Arg(1000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RouterUpdate)->Arg(10)->Arg(100)->Arg(1000)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace drover::router

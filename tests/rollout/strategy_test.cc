// Rolling over the fleet as pure functions: amounts and their rounding, placement over zones and
// hosts with capacities, and the batches with their surge and unavailability bounds.
#include "rollout/strategy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

namespace drover::rollout {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(StrategyTest, AmountsAreCountsOrPercents) {
  EXPECT_EQ(ParseAmount("3", "--max-surge").value(), (Amount{3, false}));
  EXPECT_EQ(ParseAmount("25%", "--max-surge").value(), (Amount{25, true}));
  EXPECT_EQ(ParseAmount("0", "--max-surge").value(), (Amount{0, false}));
  for (const char* bad : {"", "%", "-1", "101%", "2.5", "x", "3 ", "25%%"}) {
    const auto a = ParseAmount(bad, "--max-surge");
    EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(a.status().message(), HasSubstr("--max-surge is '"));
  }
}

TEST(StrategyTest, SurgeRoundsUpUnavailableRoundsDownAsKubernetesDoes) {
  Strategy s;
  s.instances = 6;
  s.max_surge = {25, true};        // 1.5 -> 2
  s.max_unavailable = {25, true};  // 1.5 -> 1
  const Budget b = ResolveBudget(s).value();
  EXPECT_EQ(b.surge, 2);
  EXPECT_EQ(b.unavailable, 1);
  EXPECT_EQ(b.batch(), 3);

  s.instances = 3;  // defaults: surge 25% of 3 -> 1, unavailable 0
  s.max_surge = {25, true};
  s.max_unavailable = {0, false};
  EXPECT_EQ(ResolveBudget(s)->surge, 1);
  EXPECT_EQ(ResolveBudget(s)->unavailable, 0);
}

TEST(StrategyTest, StrategiesThatCannotMoveOrCanariesTooLargeAreRefused) {
  Strategy s;
  s.instances = 3;
  s.max_surge = {0, false};
  s.max_unavailable = {25, true};  // 0.75 -> 0
  EXPECT_THAT(ResolveBudget(s).status().message(), HasSubstr("are both 0"));
  s.max_surge = {1, false};
  s.canary = Amount{100, true};
  EXPECT_THAT(ResolveBudget(s).status().message(), HasSubstr("is all of them"));
  s.canary = Amount{2, false};
  EXPECT_THAT(ResolveBudget(s).status().message(), HasSubstr("more than a batch may replace"));
  s.canary = Amount{10, true};  // 0.3 -> 1
  EXPECT_EQ(ResolveBudget(s)->canary, 1);
}

TEST(StrategyTest, PlacementSpreadsOverZonesThenHostsWithinCapacity) {
  const std::vector<PlacementHost> hosts = {
      {"a", "z1", 0, 0}, {"b", "z1", 0, 0}, {"c", "z2", 0, 0}};
  // z2 has one host, z1 two: zones alternate, so c gets as many as a and b together.
  EXPECT_THAT(Place(hosts, 4).value(), ElementsAre(0, 2, 1, 2));
  const std::vector<PlacementHost> plain = {{"h2", "", 0, 0}, {"h3", "", 0, 0}, {"h4", "", 0, 0}};
  EXPECT_THAT(Place(plain, 6).value(), ElementsAre(0, 1, 2, 0, 1, 2));
  // Capacity counts other services' instances; a full host is skipped.
  const std::vector<PlacementHost> tight = {{"h2", "", 2, 1}, {"h3", "", 0, 0}};
  EXPECT_THAT(Place(tight, 3).value(), ElementsAre(0, 1, 1));
  const std::vector<PlacementHost> full = {{"h2", "", 1, 1}, {"h3", "", 2, 0}};
  const auto none = Place(full, 3);
  EXPECT_EQ(none.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(none.status().message(), HasSubstr("room for 2 of 3"));
}

// Replays a plan: instances running and READY (old ones always READY, new ones once their batch
// passed), checking the bounds at every step.
struct Replay {
  int max_running = 0;
  int min_ready = 1 << 30;
};

Replay ReplayPlan(const Plan& plan, int olds) {
  Replay r;
  int running = olds, ready = olds;
  const auto step = [&] {
    r.max_running = std::max(r.max_running, running);
    r.min_ready = std::min(r.min_ready, ready);
  };
  for (const Batch& b : plan.batches) {
    std::size_t stopped = 0;
    for (const BatchItem& i : b.items) {
      if (i.old && stopped < b.stop_first) {
        --running, --ready, ++stopped;
        step();
      }
    }
    for (const BatchItem& i : b.items) {
      if (i.fresh) ++running;
      step();
    }
    for (const BatchItem& i : b.items) {
      if (i.fresh) ++ready;  // passed the gate
    }
    std::size_t seen = 0;
    for (const BatchItem& i : b.items) {
      if (i.old && seen++ >= b.stop_first) {
        --running, --ready;
        step();
      }
    }
  }
  for (std::size_t k = 0; k < plan.removals.size(); ++k) {
    --running, --ready;
    step();
  }
  return r;
}

TEST(StrategyTest, BatchesPairOnEachHostAndKeepSurgeAndUnavailableBounds) {
  // Six zone servers, two per host, surge 1 and unavailable 1: three batches, one host each.
  const std::vector<std::size_t> hosts = {0, 1, 2, 0, 1, 2};
  const Plan plan = PlanBatches(hosts, hosts, Budget{1, 1, 0});
  ASSERT_EQ(plan.batches.size(), 3u);
  for (std::size_t k = 0; k < 3; ++k) {
    const Batch& b = plan.batches[k];
    ASSERT_EQ(b.items.size(), 2u);
    EXPECT_EQ(b.stop_first, 1u);
    for (const BatchItem& i : b.items) {
      ASSERT_TRUE(i.fresh && i.old);
      EXPECT_EQ(hosts[*i.fresh], k);  // host by host
      EXPECT_EQ(hosts[*i.old], k);    // each pair on one host
    }
  }
  EXPECT_TRUE(plan.removals.empty());
  const Replay r = ReplayPlan(plan, 6);
  EXPECT_LE(r.max_running, 6 + 1);
  EXPECT_GE(r.min_ready, 6 - 1);
}

TEST(StrategyTest, BoundsHoldForEveryShapeOfFleetAndBudget) {
  for (int olds = 0; olds <= 7; ++olds) {
    for (int target = 1; target <= 7; ++target) {
      for (const Budget budget :
           {Budget{1, 0, 0}, Budget{0, 1, 0}, Budget{2, 1, 0}, Budget{1, 2, 1}, Budget{3, 0, 2}}) {
        std::vector<std::size_t> old_hosts, new_hosts;
        for (int i = 0; i < olds; ++i) old_hosts.push_back(static_cast<std::size_t>(i % 3));
        for (int i = 0; i < target; ++i) new_hosts.push_back(static_cast<std::size_t>(i % 2));
        const Plan plan = PlanBatches(new_hosts, old_hosts, budget);
        SCOPED_TRACE(std::to_string(olds) + " -> " + std::to_string(target) + " surge " +
                     std::to_string(budget.surge) + " unavailable " +
                     std::to_string(budget.unavailable));
        std::size_t fresh = 0, replaced = 0;
        for (const Batch& b : plan.batches) {
          EXPECT_LE(b.items.size(), static_cast<std::size_t>(std::max(budget.batch(), 1)));
          for (const BatchItem& i : b.items) {
            fresh += i.fresh ? 1 : 0;
            replaced += i.old ? 1 : 0;
          }
        }
        EXPECT_EQ(fresh, static_cast<std::size_t>(target));
        EXPECT_EQ(replaced + plan.removals.size(), static_cast<std::size_t>(olds));
        const Replay r = ReplayPlan(plan, olds);
        EXPECT_LE(r.max_running, std::max(olds, target) + budget.surge);
        if (olds >= target) {
          EXPECT_GE(r.min_ready, target - budget.unavailable);
        }
      }
    }
  }
}

TEST(StrategyTest, ACanaryBatchGoesFirst) {
  const std::vector<std::size_t> hosts = {0, 1, 2, 0, 1, 2};
  const Plan plan = PlanBatches(hosts, hosts, Budget{1, 0, 1});
  ASSERT_EQ(plan.batches.size(), 6u);
  EXPECT_TRUE(plan.batches[0].canary);
  EXPECT_EQ(plan.batches[0].items.size(), 1u);
  EXPECT_FALSE(plan.batches[1].canary);
}

}  // namespace
}  // namespace drover::rollout

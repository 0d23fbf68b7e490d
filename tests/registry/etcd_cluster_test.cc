// The EtcdCluster fixture against the real etcd binary: a single member serves reads, writes and
// compaction; a three-member cluster elects a new leader when its leader is killed, and the killed
// member rejoins on its old ports and data.
#include "testing/etcd_cluster.h"

#include <gtest/gtest.h>

#include <iostream>
#include <set>

#include "testing/eventually.h"

namespace drover::testing {
namespace {

using namespace std::chrono_literals;

TEST(EtcdClusterTest, SingleMemberServesAndCompacts) {
  EtcdCluster etcd(1);
  ASSERT_TRUE(etcd.ok()) << etcd.error();
  ASSERT_EQ(etcd.size(), 1);
  ASSERT_EQ(etcd.endpoints().size(), 1u);
  EXPECT_EQ(etcd.endpoints_csv(), etcd.endpoint(0));
  EXPECT_EQ(etcd.endpoint(0).rfind("127.0.0.1:", 0), 0u);
  EXPECT_TRUE(etcd.alive(0));
  EXPECT_EQ(etcd.WaitForLeader(), 0);

  const std::int64_t start = etcd.Revision();
  ASSERT_GE(start, 1);
  for (int i = 1; i <= 3; ++i) ASSERT_EQ(etcd.Put("k" + std::to_string(i), "v"), start + i);
  EXPECT_EQ(etcd.Revision(), start + 3);

  EXPECT_TRUE(etcd.Compact(start + 2));
  EXPECT_FALSE(etcd.Compact(start + 2)) << "a revision already compacted is refused";
  EXPECT_FALSE(etcd.Compact(start + 100)) << "a future revision is refused";
  EXPECT_TRUE(etcd.Compact(start + 3));
}

TEST(EtcdClusterTest, ThreeMembersFailOverAndRejoin) {
  EtcdCluster etcd(3);
  ASSERT_TRUE(etcd.ok()) << etcd.error();
  ASSERT_EQ(etcd.size(), 3);
  const auto endpoints = etcd.endpoints();
  ASSERT_EQ(endpoints.size(), 3u);
  EXPECT_EQ(etcd.endpoints_csv(), endpoints[0] + "," + endpoints[1] + "," + endpoints[2]);
  EXPECT_EQ(std::set<std::string>(endpoints.begin(), endpoints.end()).size(), 3u);

  const int leader = etcd.WaitForLeader();
  ASSERT_GE(leader, 0);
  ASSERT_GE(etcd.Put("before", "x"), 2);

  etcd.Kill(leader);
  EXPECT_FALSE(etcd.alive(leader));
  EXPECT_EQ(etcd.endpoints().size(), 3u) << "killed members keep their endpoint";
  const auto failover_start = std::chrono::steady_clock::now();
  const int next = etcd.WaitForLeader(10s);
  ASSERT_GE(next, 0) << "no new leader within 10 s";
  EXPECT_NE(next, leader);
  EXPECT_TRUE(etcd.alive(next));
  std::cout << "[          ] new leader after "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - failover_start)
                   .count()
            << " ms\n";
  const std::int64_t written = etcd.Put("during", "y");
  ASSERT_GE(written, 3) << "two of three members keep a quorum";

  ASSERT_TRUE(etcd.Restart(leader)) << etcd.error();
  EXPECT_TRUE(etcd.alive(leader));
  EXPECT_GE(etcd.RevisionAt(leader), written) << "the restarted member caught up";
  EXPECT_TRUE(Eventually([&] { return etcd.LeaderIndex() >= 0; }, 10s, 20ms))
      << "all three members agree on a leader again";
}

}  // namespace
}  // namespace drover::testing

#include "common/metrics_text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <latch>
#include <limits>
#include <thread>
#include <vector>

namespace drover::metrics {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(FormatValueTest, IntegersHaveNoFractionOrExponent) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(42), "42");
  EXPECT_EQ(FormatValue(-7), "-7");
  EXPECT_EQ(FormatValue(1e6), "1000000");
  EXPECT_EQ(FormatValue(9007199254740992.0), "9007199254740992");  // 2^53
}

TEST(FormatValueTest, OtherValuesUseShortestRoundTrip) {
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(2.5), "2.5");
  EXPECT_EQ(FormatValue(-0.005), "-0.005");
  EXPECT_EQ(FormatValue(1e300), "1e+300");
  EXPECT_EQ(FormatValue(2.5e-7), "2.5e-07");
  // Above 2^53 the integer path no longer applies.
  EXPECT_EQ(FormatValue(1e20), "1e+20");
  const double third = 1.0 / 3.0;
  EXPECT_EQ(std::stod(FormatValue(third)), third);
}

TEST(FormatValueTest, SpecialValues) {
  EXPECT_EQ(FormatValue(kInf), "+Inf");
  EXPECT_EQ(FormatValue(-kInf), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
}

TEST(NameValidationTest, MetricAndLabelNames) {
  EXPECT_TRUE(IsValidMetricName("http_requests_total"));
  EXPECT_TRUE(IsValidMetricName("_x:y_1"));
  EXPECT_TRUE(IsValidMetricName(":colon_first"));
  EXPECT_FALSE(IsValidMetricName(""));
  EXPECT_FALSE(IsValidMetricName("1abc"));
  EXPECT_FALSE(IsValidMetricName("a-b"));
  EXPECT_FALSE(IsValidMetricName("a b"));
  EXPECT_FALSE(IsValidMetricName("caf\xc3\xa9"));

  EXPECT_TRUE(IsValidLabelName("code"));
  EXPECT_TRUE(IsValidLabelName("_a1"));
  EXPECT_FALSE(IsValidLabelName(""));
  EXPECT_FALSE(IsValidLabelName("a:b"));  // colons are for metric names only
  EXPECT_FALSE(IsValidLabelName("9a"));
}

TEST(TextWriterTest, CounterWithoutLabels) {
  TextWriter w;
  w.Counter("drover_requests_total", "Requests served.", 42);
  EXPECT_TRUE(w.status().ok());
  EXPECT_EQ(w.text(),
            "# HELP drover_requests_total Requests served.\n"
            "# TYPE drover_requests_total counter\n"
            "drover_requests_total 42\n");
}

TEST(TextWriterTest, EmptyHelpOmitsHelpLine) {
  TextWriter w;
  w.Gauge("up", "", 1);
  EXPECT_EQ(w.text(),
            "# TYPE up gauge\n"
            "up 1\n");
}

TEST(TextWriterTest, GaugeWithLabelsAndEscaping) {
  TextWriter w;
  w.Gauge("drover_endpoint_weight", "Weight of an endpoint.\nBack\\slash \"quoted\" help.", 0.5,
          {{"service", "a\"b"}, {"path", "C:\\x"}, {"note", "line1\nline2"}});
  EXPECT_TRUE(w.status().ok()) << w.status().ToString();
  // HELP escapes backslash and newline but not quotes; label values escape all three.
  EXPECT_EQ(
      w.text(),
      "# HELP drover_endpoint_weight Weight of an endpoint.\\nBack\\\\slash \"quoted\" help.\n"
      "# TYPE drover_endpoint_weight gauge\n"
      "drover_endpoint_weight{service=\"a\\\"b\",path=\"C:\\\\x\",note=\"line1\\nline2\"} "
      "0.5\n");
}

TEST(TextWriterTest, RepeatedFamilyWritesHeaderOnce) {
  TextWriter w;
  w.Counter("hits_total", "Hits.", 1, {{"code", "200"}});
  w.Counter("hits_total", "Hits.", 2, {{"code", "500"}});
  EXPECT_TRUE(w.status().ok());
  EXPECT_EQ(w.text(),
            "# HELP hits_total Hits.\n"
            "# TYPE hits_total counter\n"
            "hits_total{code=\"200\"} 1\n"
            "hits_total{code=\"500\"} 2\n");
}

TEST(TextWriterTest, InterleavedFamiliesAreGroupedInFirstSeenOrder) {
  TextWriter w;
  for (const char* backend : {"a", "b"}) {
    w.Counter("requests_total", "Requests.", 10, {{"backend", backend}});
    w.Gauge("inflight", "In flight.", 3, {{"backend", backend}});
  }
  EXPECT_TRUE(w.status().ok());
  EXPECT_EQ(w.text(),
            "# HELP requests_total Requests.\n"
            "# TYPE requests_total counter\n"
            "requests_total{backend=\"a\"} 10\n"
            "requests_total{backend=\"b\"} 10\n"
            "# HELP inflight In flight.\n"
            "# TYPE inflight gauge\n"
            "inflight{backend=\"a\"} 3\n"
            "inflight{backend=\"b\"} 3\n");
}

TEST(TextWriterTest, HistogramIsCumulativeWithInfBucketSumAndCount) {
  TextWriter w;
  HistogramData h;
  h.upper_bounds = {0.005, 0.1, 1};
  h.bucket_counts = {2, 0, 5};
  h.overflow = 1;
  h.sum = 7.25;
  w.Histogram("rpc_seconds", "RPC latency.", h, {{"method", "Get"}});
  EXPECT_TRUE(w.status().ok()) << w.status().ToString();
  EXPECT_EQ(w.text(),
            "# HELP rpc_seconds RPC latency.\n"
            "# TYPE rpc_seconds histogram\n"
            "rpc_seconds_bucket{method=\"Get\",le=\"0.005\"} 2\n"
            "rpc_seconds_bucket{method=\"Get\",le=\"0.1\"} 2\n"
            "rpc_seconds_bucket{method=\"Get\",le=\"1\"} 7\n"
            "rpc_seconds_bucket{method=\"Get\",le=\"+Inf\"} 8\n"
            "rpc_seconds_sum{method=\"Get\"} 7.25\n"
            "rpc_seconds_count{method=\"Get\"} 8\n");
}

TEST(TextWriterTest, HistogramWithoutLabelsOrBounds) {
  TextWriter w;
  HistogramData h;
  h.overflow = 3;
  h.sum = 4;
  w.Histogram("h", "", h);
  EXPECT_TRUE(w.status().ok());
  EXPECT_EQ(w.text(),
            "# TYPE h histogram\n"
            "h_bucket{le=\"+Inf\"} 3\n"
            "h_sum 4\n"
            "h_count 3\n");
}

TEST(TextWriterTest, NumberFormattingInSamples) {
  TextWriter w;
  w.Gauge("g", "", kInf, {{"k", "pinf"}});
  w.Gauge("g", "", -kInf, {{"k", "ninf"}});
  w.Gauge("g", "", std::nan(""), {{"k", "nan"}});
  w.Gauge("g", "", 1e-9, {{"k", "tiny"}});
  EXPECT_TRUE(w.status().ok());
  EXPECT_EQ(w.text(),
            "# TYPE g gauge\n"
            "g{k=\"pinf\"} +Inf\n"
            "g{k=\"ninf\"} -Inf\n"
            "g{k=\"nan\"} NaN\n"
            "g{k=\"tiny\"} 1e-09\n");
}

TEST(TextWriterTest, InvalidMetricNameIsSkippedAndReported) {
  TextWriter w;
  w.Counter("bad-name", "x", 1);
  w.Counter("good_total", "x", 1);
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(w.status().message().find("bad-name"), std::string::npos);
  EXPECT_EQ(w.text(),
            "# HELP good_total x\n"
            "# TYPE good_total counter\n"
            "good_total 1\n");
}

TEST(TextWriterTest, InvalidLabelNameSkipsSampleWithoutCreatingFamily) {
  TextWriter w;
  w.Gauge("g", "help", 1, {{"bad label", "v"}});
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.text(), "");
}

TEST(TextWriterTest, ReservedAndRepeatedLabelsAreRejected) {
  {
    TextWriter w;
    w.Gauge("g", "", 1, {{"__name__", "x"}});
    EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(w.text(), "");
  }
  {
    TextWriter w;
    w.Gauge("g", "", 1, {{"a", "1"}, {"a", "2"}});
    EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(w.text(), "");
  }
  {
    TextWriter w;
    HistogramData h;
    w.Histogram("h", "", h, {{"le", "1"}});
    EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(w.text(), "");
  }
}

TEST(TextWriterTest, TypeMismatchIsAnErrorAndKeepsFirstType) {
  TextWriter w;
  w.Counter("x", "", 1, {{"a", "1"}});
  w.Gauge("x", "", 2, {{"a", "2"}});
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(w.status().message().find("counter"), std::string::npos);
  EXPECT_EQ(w.text(),
            "# TYPE x counter\n"
            "x{a=\"1\"} 1\n");
}

TEST(TextWriterTest, FirstErrorIsKept) {
  TextWriter w;
  w.Counter("1bad", "", 1);
  w.Counter("2bad", "", 1);
  EXPECT_NE(w.status().message().find("1bad"), std::string::npos);
}

TEST(TextWriterTest, DuplicateSeriesIsRejectedWhateverTheLabelOrder) {
  TextWriter w;
  w.Gauge("g", "", 1, {{"a", "1"}, {"b", "2"}});
  w.Gauge("g", "", 9, {{"b", "2"}, {"a", "1"}});
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.text(),
            "# TYPE g gauge\n"
            "g{a=\"1\",b=\"2\"} 1\n");
}

TEST(TextWriterTest, NegativeCounterIsRejected) {
  TextWriter w;
  w.Counter("c_total", "", -1);
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.text(), "");
}

TEST(TextWriterTest, HistogramSeriesNamesCollideWithOtherFamilies) {
  HistogramData h;
  {
    TextWriter w;
    w.Histogram("lat", "", h);
    w.Gauge("lat_count", "", 1);
    EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(w.text().find("lat_count 1"), std::string::npos);
  }
  {
    TextWriter w;
    w.Counter("lat_sum", "", 1);
    w.Histogram("lat", "", h);
    EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(w.text(),
              "# TYPE lat_sum counter\n"
              "lat_sum 1\n");
  }
}

TEST(TextWriterTest, MalformedHistogramDataIsRejected) {
  {
    TextWriter w;
    HistogramData h;
    h.upper_bounds = {1, 2};
    h.bucket_counts = {1};
    w.Histogram("h", "", h);
    EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(w.text(), "");
  }
  {
    TextWriter w;
    HistogramData h;
    h.upper_bounds = {2, 1};
    h.bucket_counts = {0, 0};
    w.Histogram("h", "", h);
    EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  }
  {
    TextWriter w;
    HistogramData h;
    h.upper_bounds = {1, kInf};
    h.bucket_counts = {0, 0};
    w.Histogram("h", "", h);
    EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(TextWriterTest, TakeReturnsTextAndResets) {
  TextWriter w;
  w.Counter("bad-name", "", 1);
  w.Counter("a_total", "", 1);
  const std::string first = w.Take();
  EXPECT_EQ(first, "# TYPE a_total counter\na_total 1\n");
  EXPECT_TRUE(w.status().ok());
  EXPECT_EQ(w.text(), "");
  // The family registry is reset too: a new scrape gets its header again.
  w.Counter("a_total", "", 2);
  EXPECT_EQ(w.Take(), "# TYPE a_total counter\na_total 2\n");
}

TEST(HistogramTest, CreateRejectsBadBounds) {
  EXPECT_EQ(Histogram::Create({}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Histogram::Create({1, 1}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Histogram::Create({2, 1}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Histogram::Create({1, kInf}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Histogram::Create({std::nan("")}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Histogram::Create({-1, 0, 1}).ok());
}

TEST(HistogramTest, ObserveUsesLessOrEqualBuckets) {
  auto created = Histogram::Create({1, 2, 4});
  ASSERT_TRUE(created.ok());
  Histogram& h = **created;
  for (const double v : {0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, -10.0}) h.Observe(v);
  h.Observe(std::nan(""));  // ignored
  const HistogramData d = h.Snapshot();
  EXPECT_EQ(d.upper_bounds, (std::vector<double>{1, 2, 4}));
  EXPECT_EQ(d.bucket_counts, (std::vector<uint64_t>{3, 2, 2}));  // {.5,1,-10} {1.5,2} {3,4}
  EXPECT_EQ(d.overflow, 1u);
  EXPECT_EQ(d.Count(), 8u);
  EXPECT_DOUBLE_EQ(d.sum, 7.0);
}

TEST(HistogramTest, SnapshotWritesThroughTextWriter) {
  auto created = Histogram::Create({0.1, 1});
  ASSERT_TRUE(created.ok());
  (*created)->Observe(0.05);
  (*created)->Observe(3);
  TextWriter w;
  w.Histogram("h_seconds", "H.", (*created)->Snapshot());
  EXPECT_EQ(w.text(),
            "# HELP h_seconds H.\n"
            "# TYPE h_seconds histogram\n"
            "h_seconds_bucket{le=\"0.1\"} 1\n"
            "h_seconds_bucket{le=\"1\"} 1\n"
            "h_seconds_bucket{le=\"+Inf\"} 2\n"
            "h_seconds_sum 3.05\n"
            "h_seconds_count 2\n");
}

TEST(HistogramTest, ConcurrentObserveCountsExactly) {
  auto created = Histogram::Create({10, 20, 30});
  ASSERT_TRUE(created.ok());
  Histogram& h = **created;
  constexpr int kThreads = 8;
  constexpr int kPerThread = 100000;
  {
    std::latch start(kThreads);  // all threads observe at once, so updates really contend
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&h, &start] {
        start.arrive_and_wait();
        // Small integers keep the double sum exact, so it can be compared exactly too.
        for (int i = 0; i < kPerThread; ++i) h.Observe(static_cast<double>(i % 40));
      });
    }
  }
  const HistogramData d = h.Snapshot();
  // Per thread, i % 40 covers 0..39 evenly: 11 values <= 10, 10 in (10,20], 10 in (20,30],
  // 9 above 30.
  constexpr uint64_t kRounds = kThreads * (kPerThread / 40);
  EXPECT_EQ(d.bucket_counts, (std::vector<uint64_t>{11 * kRounds, 10 * kRounds, 10 * kRounds}));
  EXPECT_EQ(d.overflow, 9 * kRounds);
  EXPECT_EQ(d.Count(), static_cast<uint64_t>(kThreads) * kPerThread);
  EXPECT_EQ(d.sum, static_cast<double>(kRounds) * (39 * 40 / 2));
}

}  // namespace
}  // namespace drover::metrics

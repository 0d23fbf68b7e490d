// Prometheus text exposition format (version 0.0.4): a writer for one scrape, and a lock-free
// accumulating histogram.
//
// TextWriter turns values into the text a Prometheus server scrapes from `/metrics`. It groups
// every sample of a metric family under one HELP/TYPE header, in the order families were first
// written, even when the caller interleaves families (for example one Counter and one Gauge per
// backend in a loop): the format requires all lines of a family to form one group. Programming
// errors -- an invalid name, a family re-written with another type, a duplicate series -- never
// throw and never corrupt the output: the offending sample is skipped and the first such error is
// kept in status().
//
// Histogram accumulates observations from any number of threads without a lock; Snapshot() turns
// it into the HistogramData that TextWriter::Histogram writes.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "drover/status.h"

namespace drover::metrics {

// Label name/value pairs of one sample, written in the given order.
using Labels = std::vector<std::pair<std::string, std::string>>;

// One histogram series at one instant.
struct HistogramData {
  std::vector<double> upper_bounds;     // finite, strictly increasing
  std::vector<uint64_t> bucket_counts;  // non-cumulative, one per bound: (bound[i-1], bound[i]]
  uint64_t overflow = 0;                // observations above the last bound
  double sum = 0;                       // sum of all observed values

  // Total number of observations: every bucket plus the overflow.
  uint64_t Count() const;
};

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool IsValidMetricName(std::string_view name);
// [a-zA-Z_][a-zA-Z0-9_]*
bool IsValidLabelName(std::string_view name);

// A sample value as Prometheus expects it: "+Inf", "-Inf", "NaN"; an integral value of magnitude
// at most 2^53 (where every integer is exact) without exponent or fraction ("42", "-7",
// "1000000"); anything else in the shortest form that parses back to the same double ("0.1",
// "2.5e-07", "1e+300").
std::string FormatValue(double value);

// Builds the text of one scrape. Owns its text; callers keep ownership of everything they pass.
// Not thread-safe (not even for concurrent const calls: text() assembles lazily); one thread
// builds one scrape, typically a fresh TextWriter per request.
class TextWriter {
 public:
  TextWriter() = default;

  // A counter sample. `value` must not be negative: counters only go up.
  void Counter(std::string_view name, std::string_view help, double value,
               const Labels& labels = {});
  void Gauge(std::string_view name, std::string_view help, double value, const Labels& labels = {});
  // Writes cumulative `name_bucket{...,le="<bound>"}` lines ending with le="+Inf", then
  // `name_sum` and `name_count`. `labels` must not contain "le". `h.bucket_counts` must have one
  // entry per bound; `h.upper_bounds` may be empty (only the +Inf bucket is written then).
  void Histogram(std::string_view name, std::string_view help, const HistogramData& h,
                 const Labels& labels = {});

  // The exposition text written so far, every line terminated by '\n'. The reference stays valid
  // until the next non-const call.
  const std::string& text() const;
  // Returns text() and resets the writer to its freshly constructed state, status() included;
  // check status() first.
  std::string Take();

  // OK, or the first error met so far: INVALID_ARGUMENT for an invalid metric or label name, a
  // duplicate or reserved label, a family re-written with a different type or colliding with a
  // histogram's _bucket/_sum/_count series, a repeated series, a negative counter or malformed
  // histogram data. Every such sample was skipped.
  Status status() const { return status_; }

 private:
  enum class Type { kCounter, kGauge, kHistogram };

  struct Family {
    std::string name;
    Type type;
    std::string lines;                  // HELP, TYPE, then every sample
    std::set<std::string> series_seen;  // series keys (sorted label sets) already written
  };

  // Returns the family `name` of `type`, creating it (and its HELP/TYPE lines) on first use, or
  // nullptr after recording why the sample must be skipped.
  Family* FindOrAddFamily(std::string_view name, std::string_view help, Type type);
  static std::string_view TypeName(Type type);

  // Validates `labels` and renders them as `k1="v1",k2="v2"` (no braces) into `rendered`, and
  // in name order into `series_key`; records the error and returns false when a name is
  // invalid, reserved or repeated.
  bool RenderLabels(std::string_view metric, const Labels& labels, bool histogram,
                    std::string& rendered, std::string& series_key);
  // Records the series in `family`; records an error and returns false if it is already there.
  bool AddSeries(Family& family, std::string series_key, const std::string& rendered_labels);
  void WriteSample(Family& family, std::string_view name, std::string_view suffix,
                   const std::string& rendered_labels, std::string_view extra_label,
                   std::string_view value);
  void WriteScalar(std::string_view name, std::string_view help, double value, const Labels& labels,
                   Type type);
  void RecordError(Status status);

  std::vector<Family> families_;                           // in order of first appearance
  std::map<std::string, std::size_t, std::less<>> index_;  // family name -> families_ index
  Status status_;
  mutable std::string text_;  // families_ concatenated, rebuilt by text() when stale
  mutable bool text_stale_ = false;
};

// A histogram with fixed buckets that any number of threads update concurrently. Observe() is
// lock-free: one relaxed atomic increment of a bucket and one atomic add to the sum. Snapshot()
// reads each counter atomically but not all of them at one instant, so a snapshot taken during
// observations may include an observation in its bucket but not yet in its sum; every finished
// observation is in every later snapshot. Thread-safe; not copyable or movable (hold it by the
// unique_ptr that Create returns).
class Histogram {
 public:
  // Bounds must be non-empty, finite and strictly increasing; INVALID_ARGUMENT otherwise.
  static Result<std::unique_ptr<Histogram>> Create(std::vector<double> upper_bounds);

  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  // Counts `value` in the first bucket whose bound is >= value (Prometheus' `le`), or in the
  // overflow. NaN is ignored: it would turn the sum into NaN for the life of the process.
  void Observe(double value);

  HistogramData Snapshot() const;
  const std::vector<double>& upper_bounds() const { return upper_bounds_; }

 private:
  explicit Histogram(std::vector<double> upper_bounds);

  const std::vector<double> upper_bounds_;
  // One counter per bound, then the overflow counter.
  const std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<double> sum_{0.0};
};

}  // namespace drover::metrics

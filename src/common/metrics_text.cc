#include "common/metrics_text.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <numeric>

namespace drover::metrics {
namespace {

bool IsAsciiLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsAsciiDigit(char c) { return c >= '0' && c <= '9'; }

// HELP text escapes backslash and newline; label values also escape the double quote.
void AppendEscaped(std::string& out, std::string_view text, bool escape_quote) {
  for (const char c : text) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '"':
        out += escape_quote ? "\\\"" : "\"";
        break;
      default:
        out += c;
    }
  }
}

std::string QuotedName(std::string_view name) {
  std::string out = "\"";
  AppendEscaped(out, name, /*escape_quote=*/true);
  out += '"';
  return out;
}

constexpr std::array<std::string_view, 3> kHistogramSuffixes = {"_bucket", "_sum", "_count"};

}  // namespace

std::string_view TextWriter::TypeName(Type type) {
  switch (type) {
    case Type::kCounter:
      return "counter";
    case Type::kGauge:
      return "gauge";
    case Type::kHistogram:
      return "histogram";
  }
  return "untyped";
}

uint64_t HistogramData::Count() const {
  return std::accumulate(bucket_counts.begin(), bucket_counts.end(), overflow);
}

bool IsValidMetricName(std::string_view name) {
  if (name.empty()) return false;
  if (!IsAsciiLetter(name[0]) && name[0] != '_' && name[0] != ':') return false;
  return std::all_of(name.begin() + 1, name.end(), [](char c) {
    return IsAsciiLetter(c) || IsAsciiDigit(c) || c == '_' || c == ':';
  });
}

bool IsValidLabelName(std::string_view name) {
  if (name.empty()) return false;
  if (!IsAsciiLetter(name[0]) && name[0] != '_') return false;
  return std::all_of(name.begin() + 1, name.end(),
                     [](char c) { return IsAsciiLetter(c) || IsAsciiDigit(c) || c == '_'; });
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Up to 2^53 every integer is a double, so an integral value is exactly that integer; printing
  // it as one keeps counters readable ("1000000" rather than the shortest form "1e+06").
  constexpr double kMaxExactInteger = 9007199254740992.0;  // 2^53
  std::array<char, 32> buf;                                // longest shortest-form double: 24
  std::to_chars_result result;
  if (std::trunc(value) == value && std::fabs(value) <= kMaxExactInteger) {
    result = std::to_chars(buf.data(), buf.data() + buf.size(), static_cast<int64_t>(value));
  } else {
    result = std::to_chars(buf.data(), buf.data() + buf.size(), value);
  }
  return std::string(buf.data(), result.ptr);
}

// ---------------------------------------------------------------------------------------------
// TextWriter

void TextWriter::Counter(std::string_view name, std::string_view help, double value,
                         const Labels& labels) {
  WriteScalar(name, help, value, labels, Type::kCounter);
}

void TextWriter::Gauge(std::string_view name, std::string_view help, double value,
                       const Labels& labels) {
  WriteScalar(name, help, value, labels, Type::kGauge);
}

void TextWriter::WriteScalar(std::string_view name, std::string_view help, double value,
                             const Labels& labels, Type type) {
  if (!IsValidMetricName(name)) {
    RecordError(InvalidArgumentError("invalid metric name " + QuotedName(name)));
    return;
  }
  if (type == Type::kCounter && value < 0) {
    RecordError(InvalidArgumentError("counter " + std::string(name) + " has negative value " +
                                     FormatValue(value)));
    return;
  }
  std::string rendered;
  std::string series_key;
  if (!RenderLabels(name, labels, /*histogram=*/false, rendered, series_key)) return;
  Family* family = FindOrAddFamily(name, help, type);
  if (family == nullptr || !AddSeries(*family, std::move(series_key), rendered)) return;
  WriteSample(*family, name, "", rendered, "", FormatValue(value));
}

void TextWriter::Histogram(std::string_view name, std::string_view help, const HistogramData& h,
                           const Labels& labels) {
  if (!IsValidMetricName(name)) {
    RecordError(InvalidArgumentError("invalid metric name " + QuotedName(name)));
    return;
  }
  if (h.bucket_counts.size() != h.upper_bounds.size()) {
    RecordError(InvalidArgumentError(
        "histogram " + std::string(name) + " has " + std::to_string(h.bucket_counts.size()) +
        " bucket counts for " + std::to_string(h.upper_bounds.size()) + " bounds"));
    return;
  }
  for (std::size_t i = 0; i < h.upper_bounds.size(); ++i) {
    // A finite, strictly increasing list; the +Inf bucket is implicit (the overflow).
    if (!std::isfinite(h.upper_bounds[i]) ||
        (i > 0 && h.upper_bounds[i] <= h.upper_bounds[i - 1])) {
      RecordError(InvalidArgumentError("histogram " + std::string(name) +
                                       " bounds must be finite and strictly increasing"));
      return;
    }
  }
  std::string rendered;
  std::string series_key;
  if (!RenderLabels(name, labels, /*histogram=*/true, rendered, series_key)) return;
  Family* family = FindOrAddFamily(name, help, Type::kHistogram);
  if (family == nullptr || !AddSeries(*family, std::move(series_key), rendered)) return;

  uint64_t cumulative = 0;
  std::string le;
  for (std::size_t i = 0; i < h.upper_bounds.size(); ++i) {
    cumulative += h.bucket_counts[i];
    le = "le=\"" + FormatValue(h.upper_bounds[i]) + "\"";
    WriteSample(*family, name, "_bucket", rendered, le, std::to_string(cumulative));
  }
  cumulative += h.overflow;
  WriteSample(*family, name, "_bucket", rendered, "le=\"+Inf\"", std::to_string(cumulative));
  WriteSample(*family, name, "_sum", rendered, "", FormatValue(h.sum));
  WriteSample(*family, name, "_count", rendered, "", std::to_string(cumulative));
}

bool TextWriter::RenderLabels(std::string_view metric, const Labels& labels, bool histogram,
                              std::string& rendered, std::string& series_key) {
  std::vector<std::string> pairs;  // `name="escaped value"`, in the caller's order
  pairs.reserve(labels.size());
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const std::string& label = labels[i].first;
    std::string_view problem;
    if (!IsValidLabelName(label)) {
      problem = "invalid label name";
    } else if (label.starts_with("__")) {
      problem = "reserved label name";  // "__" names belong to Prometheus itself
    } else if (histogram && label == "le") {
      problem = "reserved label name";  // the bucket bound
    } else if (std::any_of(labels.begin(), labels.begin() + static_cast<std::ptrdiff_t>(i),
                           [&](const auto& earlier) { return earlier.first == label; })) {
      problem = "repeated label name";
    }
    if (!problem.empty()) {
      RecordError(InvalidArgumentError(std::string(problem) + " " + QuotedName(label) +
                                       " on metric " + std::string(metric)));
      return false;
    }
    std::string pair = label + "=\"";
    AppendEscaped(pair, labels[i].second, /*escape_quote=*/true);
    pair += '"';
    pairs.push_back(std::move(pair));
  }
  for (const std::string& pair : pairs) {
    if (!rendered.empty()) rendered += ',';
    rendered += pair;
  }
  // Prometheus identifies a series by its label set, whatever order the labels came in. Label
  // names are distinct, so sorting the rendered pairs sorts by name.
  std::sort(pairs.begin(), pairs.end());
  for (const std::string& pair : pairs) {
    series_key += pair;
    series_key += ',';
  }
  return true;
}

TextWriter::Family* TextWriter::FindOrAddFamily(std::string_view name, std::string_view help,
                                                Type type) {
  if (const auto it = index_.find(name); it != index_.end()) {
    Family& family = families_[it->second];
    if (family.type != type) {
      RecordError(InvalidArgumentError("metric " + std::string(name) + " written as " +
                                       std::string(TypeName(type)) + " but already written as " +
                                       std::string(TypeName(family.type))));
      return nullptr;
    }
    return &family;
  }
  // A histogram owns the series names <name>_bucket, _sum and _count; a scraper cannot tell
  // another family's samples under one of those names from the histogram's own.
  for (const std::string_view suffix : kHistogramSuffixes) {
    std::string_view owner;
    if (name.ends_with(suffix)) {
      const auto it = index_.find(name.substr(0, name.size() - suffix.size()));
      if (it != index_.end() && families_[it->second].type == Type::kHistogram) owner = it->first;
    }
    if (type == Type::kHistogram && index_.contains(std::string(name) + std::string(suffix))) {
      owner = name;
    }
    if (!owner.empty()) {
      RecordError(InvalidArgumentError("metric " + std::string(name) +
                                       " collides with the series of histogram " +
                                       std::string(owner)));
      return nullptr;
    }
  }

  Family family{std::string(name), type, {}, {}};
  if (!help.empty()) {
    family.lines += "# HELP ";
    family.lines += name;
    family.lines += ' ';
    AppendEscaped(family.lines, help, /*escape_quote=*/false);
    family.lines += '\n';
  }
  family.lines += "# TYPE ";
  family.lines += name;
  family.lines += ' ';
  family.lines += TypeName(type);
  family.lines += '\n';
  index_.emplace(std::string(name), families_.size());
  families_.push_back(std::move(family));
  return &families_.back();
}

bool TextWriter::AddSeries(Family& family, std::string series_key,
                           const std::string& rendered_labels) {
  if (!family.series_seen.insert(std::move(series_key)).second) {
    RecordError(InvalidArgumentError("metric " + family.name + " already has the series {" +
                                     rendered_labels + "}"));
    return false;
  }
  return true;
}

void TextWriter::WriteSample(Family& family, std::string_view name, std::string_view suffix,
                             const std::string& rendered_labels, std::string_view extra_label,
                             std::string_view value) {
  std::string& out = family.lines;
  out += name;
  out += suffix;
  if (!rendered_labels.empty() || !extra_label.empty()) {
    out += '{';
    out += rendered_labels;
    if (!rendered_labels.empty() && !extra_label.empty()) out += ',';
    out += extra_label;
    out += '}';
  }
  out += ' ';
  out += value;
  out += '\n';
  text_stale_ = true;
}

void TextWriter::RecordError(Status status) {
  if (status_.ok()) status_ = std::move(status);
}

const std::string& TextWriter::text() const {
  if (text_stale_) {
    text_.clear();
    for (const Family& family : families_) text_ += family.lines;
    text_stale_ = false;
  }
  return text_;
}

std::string TextWriter::Take() {
  std::string out = text();
  *this = TextWriter();
  return out;
}

// ---------------------------------------------------------------------------------------------
// Histogram

Result<std::unique_ptr<Histogram>> Histogram::Create(std::vector<double> upper_bounds) {
  if (upper_bounds.empty()) return InvalidArgumentError("histogram needs at least one bound");
  for (std::size_t i = 0; i < upper_bounds.size(); ++i) {
    if (!std::isfinite(upper_bounds[i]) || (i > 0 && upper_bounds[i] <= upper_bounds[i - 1])) {
      return InvalidArgumentError("histogram bounds must be finite and strictly increasing");
    }
  }
  return std::unique_ptr<Histogram>(new Histogram(std::move(upper_bounds)));
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)),
      counts_(std::make_unique<std::atomic<uint64_t>[]>(upper_bounds_.size() + 1)) {}

void Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  const auto bucket = static_cast<std::size_t>(
      std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) - upper_bounds_.begin());
  // Relaxed: each counter is independent; readers only need every finished increment, which
  // coherence on the single atomic already guarantees.
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  // An infinite observation is counted in its bucket but kept out of the sum, which would
  // otherwise stay infinite (or NaN) for the rest of the process.
  if (std::isfinite(value)) sum_.fetch_add(value, std::memory_order_relaxed);
}

HistogramData Histogram::Snapshot() const {
  HistogramData data;
  data.upper_bounds = upper_bounds_;
  data.bucket_counts.reserve(upper_bounds_.size());
  for (std::size_t i = 0; i < upper_bounds_.size(); ++i) {
    data.bucket_counts.push_back(counts_[i].load(std::memory_order_relaxed));
  }
  data.overflow = counts_[upper_bounds_.size()].load(std::memory_order_relaxed);
  data.sum = sum_.load(std::memory_order_relaxed);
  return data;
}

}  // namespace drover::metrics

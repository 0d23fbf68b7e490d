#include "registry/json_codec.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "common/json_text.h"

namespace drover::registry {
namespace {

Status TypeError(const char* name, const char* type) {
  return InvalidArgumentError(std::string("field '") + name + "' must be " + type);
}

}  // namespace

std::string DumpJson(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

nlohmann::json InstanceToJson(const Instance& in) {
  nlohmann::json j = {
      {"service", in.service},
      {"id", in.id},
      {"address", in.spec.address},
      {"generation", in.spec.generation},
      {"state", InstanceStateName(in.spec.state)},
      {"ttl_ms", in.spec.ttl_ms},
      {"weight", in.spec.weight},
      {"zone", in.spec.zone},
      {"labels", in.spec.labels},
      {"version", in.spec.version},
      {"accepting", in.spec.accepting},
      {"create_revision", in.create_revision},
      {"mod_revision", in.mod_revision},
  };
  if (in.ready_since != SystemTime{}) j["ready_since_ms"] = ToUnixMillis(in.ready_since);
  return j;
}

nlohmann::json EventToJson(const Event& e) {
  nlohmann::json j = {{"type", EventTypeName(e.type)}, {"revision", e.revision}};
  switch (e.type) {
    case EventType::kPut:
      j["instance"] = InstanceToJson(e.instance);
      break;
    case EventType::kDelete:
      j["instance"] = InstanceToJson(e.instance);
      j["reason"] = RemovalReasonName(e.reason);
      break;
    case EventType::kResync: {
      nlohmann::json instances = nlohmann::json::array();
      for (const Instance& in : e.snapshot) instances.push_back(InstanceToJson(in));
      j["instances"] = std::move(instances);
      j["degraded"] = e.degraded;
      break;
    }
    case EventType::kProgress:
      j["degraded"] = e.degraded;
      break;
  }
  return j;
}

Result<nlohmann::json> ParseObject(std::string_view body,
                                   std::initializer_list<std::string_view> allowed) {
  auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgumentError("body is not valid JSON");
  if (!j.is_object()) return InvalidArgumentError("body must be a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      return InvalidArgumentError("unknown field '" + key + "'");
    }
  }
  return j;
}

Result<std::uint64_t> GetUint(const nlohmann::json& object, const char* name, bool required,
                              std::uint64_t fallback) {
  auto it = object.find(name);
  if (it == object.end()) {
    if (required) return InvalidArgumentError(std::string("missing field '") + name + "'");
    return fallback;
  }
  if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<std::int64_t>() >= 0)) {
    return TypeError(name, "a non-negative integer");
  }
  return it->get<std::uint64_t>();
}

Result<std::string> GetString(const nlohmann::json& object, const char* name, bool required,
                              std::string fallback) {
  auto it = object.find(name);
  if (it == object.end()) {
    if (required) return InvalidArgumentError(std::string("missing field '") + name + "'");
    return fallback;
  }
  if (!it->is_string()) return TypeError(name, "a string");
  return it->get<std::string>();
}

Result<bool> GetBool(const nlohmann::json& object, const char* name, bool fallback) {
  auto it = object.find(name);
  if (it == object.end()) return fallback;
  if (!it->is_boolean()) return TypeError(name, "true or false");
  return it->get<bool>();
}

namespace {

// Reads a registration's body event by event straight into an InstanceSpec (nlohmann's SAX
// interface): no document is built -- as a document, a registration's body cost 14 allocations,
// the most of any step of an HTTP registration. The rules are ParseObject's and the Get*'s: a
// JSON object of known members, each of its type; the first member that breaks one is the error.
//
// The stored form (`Stored::kYes`, StoredInstanceFromJson) adds create_revision and
// ready_since_ms, requires every member, and skips members it does not know (a newer process
// may have written them) instead of refusing them.
class SpecReader final : public nlohmann::json_sax<nlohmann::json> {
 public:
  enum class Stored : std::uint8_t { kNo, kYes };
  explicit SpecReader(Stored stored = Stored::kNo) : stored_(stored == Stored::kYes) {}

  Result<InstanceSpec> Read(std::string_view body) {
    const bool parsed = nlohmann::json::sax_parse(body.data(), body.data() + body.size(), this);
    if (!error_.ok()) return error_;
    if (!parsed) return InvalidArgumentError("body is not valid JSON");
    if (stored_) {
      for (const auto& [name, field] : kFields) {
        if ((seen_ & Bit(field)) == 0) {
          return InvalidArgumentError("missing field '" + std::string(name) + "'");
        }
      }
    }
    if ((seen_ & Bit(Field::kAddress)) == 0) return InvalidArgumentError("missing field 'address'");
    if ((seen_ & Bit(Field::kGeneration)) == 0) {
      return InvalidArgumentError("missing field 'generation'");
    }
    DROVER_ASSIGN_OR_RETURN(spec_.state, ParseInstanceState(state_));
    return std::move(spec_);
  }
  std::uint64_t create_revision() const { return create_revision_; }
  std::int64_t ready_since_ms() const { return ready_since_ms_; }

  bool null() override { return Skipped() || Scalar(Kind::kNull); }
  bool boolean(bool value) override {
    if (Skipped()) return true;
    if (!Scalar(Kind::kBool)) return false;
    spec_.accepting = value;
    return true;
  }
  // nlohmann reads a non-negative integer as unsigned: this one is negative.
  bool number_integer(number_integer_t value) override {
    if (Skipped()) return true;
    if (field_ == Field::kReadySinceMs && depth_ == 1) {  // (a time before 1970)
      ready_since_ms_ = value;
      return true;
    }
    return Scalar(Kind::kNegative);
  }
  bool number_unsigned(number_unsigned_t value) override {
    if (Skipped()) return true;
    if (!Scalar(Kind::kUnsigned)) return false;
    switch (field_) {
      case Field::kGeneration:
        spec_.generation = value;
        return true;
      case Field::kTtlMs:
        if (value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
          return Fail(InvalidArgumentError("field 'ttl_ms' is out of range"));
        }
        spec_.ttl_ms = static_cast<std::int64_t>(value);
        return true;
      case Field::kWeight:
        if (value > std::numeric_limits<std::uint32_t>::max()) {
          return Fail(InvalidArgumentError("field 'weight' is out of range"));
        }
        spec_.weight = static_cast<std::uint32_t>(value);
        return true;
      case Field::kCreateRevision:
        create_revision_ = value;
        return true;
      case Field::kReadySinceMs:
        if (value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
          return Fail(InvalidArgumentError("field 'ready_since_ms' is out of range"));
        }
        ready_since_ms_ = static_cast<std::int64_t>(value);
        return true;
      default:
        return true;
    }
  }
  bool number_float(number_float_t, const string_t&) override {
    return Skipped() || Scalar(Kind::kFloat);
  }
  bool string(string_t& value) override {
    if (Skipped()) return true;
    if (depth_ == 2) {  // a label's value
      spec_.labels[std::move(label_)] = std::move(value);
      return true;
    }
    if (!Scalar(Kind::kString)) return false;
    switch (field_) {
      case Field::kAddress:
        spec_.address = std::move(value);
        return true;
      case Field::kState:
        state_ = std::move(value);
        return true;
      case Field::kZone:
        spec_.zone = std::move(value);
        return true;
      case Field::kVersion:
        spec_.version = std::move(value);
        return true;
      default:
        return true;
    }
  }
  bool binary(binary_t&) override { return Skipped() || Scalar(Kind::kNull); }  // (not in text)
  bool start_object(std::size_t) override {
    if (Skipping()) return true;
    if (depth_ == 0) {
      depth_ = 1;
      return true;
    }
    if (depth_ == 1 && field_ == Field::kLabels) {
      depth_ = 2;
      spec_.labels.clear();  // a repeated "labels" replaces the first, as a document's would
      return true;
    }
    return Nested();
  }
  bool key(string_t& name) override {
    if (skip_ > 0) return true;
    if (depth_ == 2) {
      label_ = std::move(name);
      return true;
    }
    field_ = FieldNamed(name);
    if (field_ == Field::kUnknown) {
      if (stored_) {
        skip_ = 1;  // its value, however deep
        return true;
      }
      return Fail(InvalidArgumentError("unknown field '" + name + "'"));
    }
    seen_ |= Bit(field_);
    return true;
  }
  bool end_object() override {
    if (skip_ > 0) return Ended();
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override { return Skipping() || Nested(); }
  bool end_array() override { return skip_ == 0 || Ended(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  enum class Field : std::uint8_t {
    kUnknown,
    kAddress,
    kGeneration,
    kState,
    kTtlMs,
    kWeight,
    kZone,
    kLabels,
    kVersion,
    kAccepting,
    kCreateRevision,  // the stored form's
    kReadySinceMs,    // the stored form's
  };
  enum class Kind : std::uint8_t { kNull, kBool, kNegative, kUnsigned, kFloat, kString };

  // Each member's name (the literals end in NUL: Name() hands out their data()).
  static constexpr std::pair<std::string_view, Field> kFields[] = {
      {"address", Field::kAddress},
      {"generation", Field::kGeneration},
      {"state", Field::kState},
      {"ttl_ms", Field::kTtlMs},
      {"weight", Field::kWeight},
      {"zone", Field::kZone},
      {"labels", Field::kLabels},
      {"version", Field::kVersion},
      {"accepting", Field::kAccepting},
      {"create_revision", Field::kCreateRevision},
      {"ready_since_ms", Field::kReadySinceMs}};
  static constexpr std::uint32_t Bit(Field field) {
    return std::uint32_t{1} << static_cast<unsigned>(field);
  }
  // The stored form's own members are unknown to the API's body.
  Field FieldNamed(std::string_view name) const {
    for (const auto& [n, f] : kFields) {
      if (n != name) continue;
      const bool stored_only = f == Field::kCreateRevision || f == Field::kReadySinceMs;
      return stored_only && !stored_ ? Field::kUnknown : f;
    }
    return Field::kUnknown;
  }
  static const char* Name(Field field) {
    for (const auto& [n, f] : kFields) {
      if (f == field) return n.data();
    }
    return "?";
  }

  // A value that is not an object or array, for the member `field_` (or a label, or the body).
  bool Scalar(Kind kind) {
    if (depth_ == 0) return Fail(InvalidArgumentError("body must be a JSON object"));
    if (depth_ == 2) return Fail(TypeError("labels", "an object of strings"));
    switch (field_) {
      case Field::kAddress:
      case Field::kState:
      case Field::kZone:
      case Field::kVersion:
        return kind == Kind::kString || Fail(TypeError(Name(field_), "a string"));
      case Field::kGeneration:
      case Field::kTtlMs:
      case Field::kWeight:
      case Field::kCreateRevision:
      case Field::kReadySinceMs:
        return kind == Kind::kUnsigned || Fail(TypeError(Name(field_), "a non-negative integer"));
      case Field::kAccepting:
        return kind == Kind::kBool || Fail(TypeError("accepting", "true or false"));
      case Field::kLabels:
      case Field::kUnknown:
        break;
    }
    return Fail(TypeError("labels", "an object of strings"));
  }
  // An object or array where none belongs.
  bool Nested() {
    if (depth_ == 0) return Fail(InvalidArgumentError("body must be a JSON object"));
    return Scalar(Kind::kNull);  // the same error as any other value of the wrong type
  }
  bool Fail(Status s) {
    error_ = std::move(s);
    return false;
  }
  // An unknown member's value is being skipped (stored form): a scalar ends it at its own level.
  bool Skipped() {
    if (skip_ == 0) return false;
    if (skip_ == 1) skip_ = 0;
    return true;
  }
  // An object or array opens while skipping: one level deeper.
  bool Skipping() {
    if (skip_ == 0) return false;
    ++skip_;
    return true;
  }
  // An object or array closes while skipping: once back at the member's level the value is over.
  bool Ended() {
    if (--skip_ == 1) skip_ = 0;
    return true;
  }

  const bool stored_;
  InstanceSpec spec_;
  std::string state_ = "STARTING";
  std::string label_;
  Field field_ = Field::kUnknown;
  int depth_ = 0;  // 1: in the body's object; 2: in its labels
  int skip_ = 0;   // skipping an unknown member's value: 1 before it starts, +1 per open level
  std::uint32_t seen_ = 0;  // Bit(field) of each member read
  std::uint64_t create_revision_ = 0;
  std::int64_t ready_since_ms_ = 0;
  Status error_;
};

}  // namespace

Result<InstanceSpec> SpecFromJson(std::string_view body) { return SpecReader().Read(body); }

void AppendLabelsJson(std::string& out, const std::map<std::string, std::string>& labels) {
  out.push_back('{');
  bool first = true;
  for (const auto& [key, value] : labels) {
    if (!first) out.push_back(',');
    first = false;
    AppendJsonString(out, key);
    out.push_back(':');
    AppendJsonString(out, value);
  }
  out.push_back('}');
}

std::string StoredInstanceJson(const InstanceSpec& s, std::uint64_t create_revision,
                               std::int64_t ready_since_ms) {
  std::string out;
  out.reserve(160 + s.address.size() + s.zone.size() + s.version.size() + 24 * s.labels.size());
  const auto member = [&out](std::string_view name) {
    out.push_back(out.empty() ? '{' : ',');
    AppendJsonString(out, name);
    out.push_back(':');
  };
  member("address");
  AppendJsonString(out, s.address);
  member("generation");
  out += std::to_string(s.generation);
  member("state");
  AppendJsonString(out, InstanceStateName(s.state));
  member("ttl_ms");
  out += std::to_string(s.ttl_ms);
  member("weight");
  out += std::to_string(s.weight);
  member("zone");
  AppendJsonString(out, s.zone);
  member("labels");
  AppendLabelsJson(out, s.labels);
  member("version");
  AppendJsonString(out, s.version);
  member("accepting");
  out += s.accepting ? "true" : "false";
  member("create_revision");
  out += std::to_string(create_revision);
  member("ready_since_ms");
  out += std::to_string(ready_since_ms);
  out.push_back('}');
  return out;
}

Result<StoredInstance> StoredInstanceFromJson(std::string_view text) {
  SpecReader reader(SpecReader::Stored::kYes);
  DROVER_ASSIGN_OR_RETURN(InstanceSpec spec, reader.Read(text));
  return StoredInstance{std::move(spec), reader.create_revision(), reader.ready_since_ms()};
}

Result<StoredDeploy> DeployFromRecord(const std::string& id, const std::string& record_json,
                                      bool active) {
  const auto record = nlohmann::json::parse(record_json, nullptr, /*allow_exceptions=*/false);
  if (!record.is_object() || !record.contains("service") || !record["service"].is_string()) {
    return InvalidArgumentError("a deploy record is a JSON object with a service");
  }
  StoredDeploy d;
  d.id = id;
  d.service = record["service"].get<std::string>();
  d.record = record_json;
  d.active = active;
  return d;
}

}  // namespace drover::registry

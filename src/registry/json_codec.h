// JSON forms of the registry's model, shared by the HTTP API and the CLI. Parsing is strict: a
// body with a wrong type, an unknown field or a missing required field is INVALID_ARGUMENT.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "registry/model.h"
#include "registry/store.h"

namespace drover::registry {

// One line of JSON; bytes that are not valid UTF-8 (say, echoed from a request path) become
// U+FFFD instead of throwing.
std::string DumpJson(const nlohmann::json& j);

nlohmann::json InstanceToJson(const Instance& instance);
nlohmann::json EventToJson(const Event& event);

// The body of `PUT /v1/services/{service}/instances/{id}`: {address, generation (required);
// state, ttl_ms, weight, zone, labels, version, accepting (optional)}.
Result<InstanceSpec> SpecFromJson(std::string_view body);

// Labels as one JSON object of strings, in key order (`{"a":"1","b":"2"}`), appended to `out`
// without building a document: the SQLite store's labels column and the stored instance below.
void AppendLabelsJson(std::string& out, const std::map<std::string, std::string>& labels);

// An instance as a shared store keeps it (the etcd store's value): the spec's members, then
// `create_revision` and `ready_since_ms`, as one JSON object written without building a document
// (the registry writes one per registration). Reading requires every member, with the types of
// SpecFromJson, and skips members it does not know (written by a newer process).
struct StoredInstance {
  InstanceSpec spec;
  std::uint64_t create_revision = 0;
  std::int64_t ready_since_ms = 0;
};
std::string StoredInstanceJson(const InstanceSpec& spec, std::uint64_t create_revision,
                               std::int64_t ready_since_ms);
Result<StoredInstance> StoredInstanceFromJson(std::string_view text);

// A deploy to store from its record's JSON text (a JSON object naming its "service"), for
// Registry::PutDeploy; INVALID_ARGUMENT otherwise. The record is kept as given.
Result<StoredDeploy> DeployFromRecord(const std::string& id, const std::string& record_json,
                                      bool active);

// A JSON object body whose members are all among `allowed`; INVALID_ARGUMENT otherwise.
Result<nlohmann::json> ParseObject(std::string_view body,
                                   std::initializer_list<std::string_view> allowed);

// Typed member access for ParseObject results; `required` members must be present.
Result<std::uint64_t> GetUint(const nlohmann::json& object, const char* name, bool required,
                              std::uint64_t fallback = 0);
Result<std::string> GetString(const nlohmann::json& object, const char* name, bool required,
                              std::string fallback = {});
Result<bool> GetBool(const nlohmann::json& object, const char* name, bool fallback);

}  // namespace drover::registry

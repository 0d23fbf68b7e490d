#include "common/tokens.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>

namespace drover {
namespace {

constexpr std::size_t kMinTokenLength = 16;

// Compares without an early exit, so response time does not reveal how much of a guess matched.
bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::size_t n = std::max(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

// "2027-03-31T00:00:00Z": RFC 3339 in UTC, to the second.
std::optional<SystemTime> ParseUtc(const std::string& text) {
  std::tm tm{};
  char zulu = 0;
  int consumed = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%c%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &zulu, &consumed) != 7 ||
      zulu != 'Z' || static_cast<std::size_t>(consumed) != text.size()) {
    return std::nullopt;
  }
  // system_clock counts nanoseconds in 64 bits: about 1677..2262. Expiry dates are near.
  if (tm.tm_year < 1970 || tm.tm_year > 2200) return std::nullopt;
  const std::tm given = tm;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const std::time_t t = ::timegm(&tm);
  // timegm normalises out-of-range fields (Feb 30 -> Mar 2); a real date comes back unchanged.
  if (t == static_cast<std::time_t>(-1) || tm.tm_year + 1900 != given.tm_year ||
      tm.tm_mon + 1 != given.tm_mon || tm.tm_mday != given.tm_mday || tm.tm_hour != given.tm_hour ||
      tm.tm_min != given.tm_min || tm.tm_sec != given.tm_sec) {
    return std::nullopt;
  }
  return std::chrono::system_clock::from_time_t(t);
}

std::string FormatUtc(SystemTime t) {
  const std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  ::gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

Result<std::shared_ptr<const Authorizer>> Authorizer::LoadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return InvalidArgumentError("cannot read token file " + path);
  std::stringstream text;
  text << in.rdbuf();
  auto auth = FromYaml(text.str());
  if (!auth.ok()) return auth.status().WithContext(path);
  return auth;
}

Result<std::shared_ptr<const Authorizer>> Authorizer::FromYaml(std::string_view yaml) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(std::string("token file is not valid YAML: ") + e.what());
  }
  if (!root.IsMap() || !root["tokens"] || !root["tokens"].IsSequence()) {
    return InvalidArgumentError("token file must have a 'tokens' list");
  }
  std::vector<Token> tokens;
  std::set<std::string> names, secrets;
  try {
    for (const YAML::Node& entry : root["tokens"]) {
      const std::string where = "token entry " + std::to_string(tokens.size() + 1);
      if (!entry.IsMap() || !entry["name"] || !entry["token"]) {
        return InvalidArgumentError(where + ": needs 'name' and 'token'");
      }
      for (const auto& kv : entry) {
        const std::string key = kv.first.as<std::string>();
        if (key != "name" && key != "token" && key != "write" && key != "deploy" &&
            key != "read_only" && key != "expires") {
          return InvalidArgumentError(where + ": unknown field '" + key + "'");
        }
      }
      Token t;
      t.name = entry["name"].as<std::string>();
      t.secret = entry["token"].as<std::string>();
      if (t.secret.size() < kMinTokenLength) {
        return InvalidArgumentError(where + " (" + t.name + "): token shorter than " +
                                    std::to_string(kMinTokenLength) + " characters");
      }
      if (!names.insert(t.name).second) {
        return InvalidArgumentError(where + ": duplicate name '" + t.name + "'");
      }
      if (!secrets.insert(t.secret).second) {
        return InvalidArgumentError(where + " (" + t.name + "): the same token appears twice");
      }
      if (entry["read_only"]) t.read_only = entry["read_only"].as<bool>();
      for (const auto& [key, list] : {std::pair{"write", &t.write}, {"deploy", &t.deploy}}) {
        if (!entry[key]) continue;
        if (!entry[key].IsSequence()) {
          return InvalidArgumentError(where + " (" + t.name + "): '" + key + "' must be a list");
        }
        for (const YAML::Node& s : entry[key]) list->push_back(s.as<std::string>());
      }
      if (entry["expires"]) {
        const std::string text = entry["expires"].as<std::string>();
        t.expires = ParseUtc(text);
        if (!t.expires) {
          return InvalidArgumentError(
              where + " (" + t.name + "): 'expires' is '" + text +
              "'; give a UTC time like 2027-03-31T00:00:00Z (years 1970..2200)");
        }
      }
      if (t.read_only && (!t.write.empty() || !t.deploy.empty())) {
        return InvalidArgumentError(where + " (" + t.name + "): read_only with a '" +
                                    (t.write.empty() ? "deploy" : "write") + "' list");
      }
      tokens.push_back(std::move(t));
    }
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(std::string("token file: ") + e.what());
  }
  if (tokens.empty()) return InvalidArgumentError("token file lists no tokens");
  return std::shared_ptr<const Authorizer>(new Authorizer(std::move(tokens)));
}

Result<const Authorizer::Token*> Authorizer::Find(std::string_view authorization,
                                                  SystemTime now) const {
  if (authorization.empty()) {
    return UnauthenticatedError("missing 'Authorization: Bearer <token>'");
  }
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.substr(0, kBearer.size()) != kBearer) {
    return UnauthenticatedError("the Authorization header must be 'Bearer <token>'");
  }
  const std::string_view presented = authorization.substr(kBearer.size());
  const Token* found = nullptr;
  // Every token is compared, so timing does not say which one (or whether any) matched.
  for (const Token& t : tokens_) {
    if (ConstantTimeEquals(t.secret, presented)) found = &t;
  }
  if (found == nullptr) return UnauthenticatedError("unknown bearer token");
  if (found->expires && now >= *found->expires) {
    return UnauthenticatedError("token '" + found->name + "' expired at " +
                                FormatUtc(*found->expires));
  }
  return found;
}

Result<std::string> Authorizer::Authenticate(std::string_view authorization, SystemTime now) const {
  DROVER_ASSIGN_OR_RETURN(const Token* t, Find(authorization, now));
  return t->name;
}

namespace {

bool Lists(const std::vector<std::string>& allowed, std::string_view service) {
  return std::any_of(allowed.begin(), allowed.end(),
                     [&](const std::string& s) { return s == "*" || s == service; });
}

}  // namespace

Status Authorizer::AuthorizeWrite(std::string_view authorization, std::string_view service,
                                  SystemTime now) const {
  DROVER_ASSIGN_OR_RETURN(const Token* t, Find(authorization, now));
  if (Lists(t->write, service)) return Status::Ok();
  return PermissionDeniedError("token '" + t->name + "' may not write service '" +
                               std::string(service) + "'");
}

Status Authorizer::AuthorizeDeploy(std::string_view authorization, std::string_view service,
                                   SystemTime now) const {
  DROVER_ASSIGN_OR_RETURN(const Token* t, Find(authorization, now));
  if (Lists(t->deploy, service)) return Status::Ok();
  return PermissionDeniedError("token '" + t->name + "' may not deploy service '" +
                               std::string(service) + "' (its 'deploy' list does not name it)");
}

}  // namespace drover

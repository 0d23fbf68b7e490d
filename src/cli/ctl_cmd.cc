// `drover ctl`: the operator's view of a registry over its HTTP API. Tables for people, --json
// for scripts; exit code 0 on success, 1 when the registry refused, 2 on bad usage, 3 when the
// registry could not be reached.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "drover/cli.h"
#include "net/http_client.h"
#include "registry/model.h"
#include "rollout/agent_client.h"

namespace drover::cli {
namespace {

struct CtlArgs {
  std::string registry = "http://127.0.0.1:7070";
  std::string deploys_agent;  // deploys: an agent's history, not the registry's
  std::string token;
  std::string ca_file;
  bool json = false;
  std::string service;
  std::string id;
  std::optional<std::uint64_t> generation;
  std::uint64_t from = 0;
  std::uint64_t count = 0;  // watch: stop after this many events (0: never)
  // register
  std::string address;
  std::string state = "READY";
  std::int64_t ttl_ms = 10'000;
  std::uint32_t weight = 1;
  std::string zone;
  std::string version;
};

[[noreturn]] void Fail(int code, const std::string& message) {
  std::cerr << "drover ctl: " << message << "\n";
  throw CLI::RuntimeError(code);
}

// Names go into URLs: check them here, with the registry's own rules, for a clear message.
void CheckNames(const CtlArgs& args) {
  const registry::Limits limits;
  if (!args.service.empty()) {
    if (Status s = registry::ValidateName("service", args.service, limits); !s.ok()) {
      Fail(kExitUsage, s.message());
    }
  }
  if (!args.id.empty()) {
    if (Status s = registry::ValidateName("instance id", args.id, limits); !s.ok()) {
      Fail(kExitUsage, s.message());
    }
  }
}

net::HttpClient Client(const CtlArgs& args, const std::string& peer = "registry") {
  CheckNames(args);
  std::string token = args.token;
  if (token.empty()) {
    if (const char* env = std::getenv("DROVER_TOKEN")) token = env;
  }
  auto client =
      net::HttpClient::Create(args.registry, token, std::chrono::seconds(10), args.ca_file, peer);
  if (!client.ok()) Fail(kExitUsage, client.status().message());
  return std::move(client).value();
}

[[noreturn]] void Unreachable(const Status& status) {
  Fail(kExitUnreachable, "cannot reach the " + status.message());
}

// Exits with the registry's refusal: "registry answered 400: OUT_OF_RANGE: ...".
[[noreturn]] void Refused(const net::HttpResult& reply, const std::string& peer = "registry") {
  const auto json = nlohmann::json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
  std::string message = reply.body;
  while (!message.empty() && message.back() == '\n') message.pop_back();
  if (json.is_object() && json.contains("error") && json["error"].is_object()) {
    message = json["error"].value("code", "") + ": " + json["error"].value("message", "");
  }
  Fail(kExitRefused, peer + " answered " + std::to_string(reply.status) + ": " + message);
}

// The JSON body of a successful reply; exits with the registry's error otherwise.
nlohmann::json Call(const net::HttpClient& client, std::string_view method,
                    const std::string& target, const std::string& body = {},
                    const std::string& peer = "registry") {
  auto reply = client.Send(method, target, body);
  if (!reply.ok()) Unreachable(reply.status());
  if (reply->status != 200) Refused(*reply, peer);
  auto json = nlohmann::json::parse(reply->body, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    Fail(kExitRefused, peer + " sent a reply that is not JSON: " + reply->body.substr(0, 200));
  }
  return json;
}

std::string InstancePath(const CtlArgs& args) {
  return "/v1/services/" + args.service + "/instances/" + args.id;
}

// The generation to write with: the one given, else the instance's current one.
std::uint64_t Generation(const net::HttpClient& client, const CtlArgs& args) {
  if (args.generation) return *args.generation;
  const auto list = Call(client, "GET", "/v1/services/" + args.service + "/instances");
  for (const auto& in : list["instances"]) {
    if (in.value("id", "") == args.id) return in.value("generation", std::uint64_t{0});
  }
  Fail(kExitRefused, args.service + "/" + args.id + " is not registered");
}

// Colours only for a person at a terminal: never into a pipe or file, never with NO_COLOR set.
bool UseColour() {
  static const bool on = ::isatty(STDOUT_FILENO) != 0 && std::getenv("NO_COLOR") == nullptr;
  return on;
}

// The ANSI colour of a state or verdict cell; empty for anything else.
std::string_view ColourOf(const std::string& cell) {
  if (cell == "READY" || cell == "pass") return "\033[32m";
  if (cell == "DRAINING" || cell == "running") return "\033[33m";
  if (cell == "STARTING") return "\033[36m";
  if (cell == "fail" || cell == "NOT READY" || cell == "DEGRADED") return "\033[31m";
  return {};
}

std::string Paint(const std::string& cell) {
  const std::string_view colour = UseColour() ? ColourOf(cell) : std::string_view();
  return colour.empty() ? cell : std::string(colour) + cell + "\033[0m";
}

// Columns padded to their widest cell; state-like cells coloured on a terminal.
void PrintTable(const std::vector<std::string>& header,
                const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells, bool paint) {
    std::string out;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      out += paint ? Paint(cells[c]) : cells[c];
      if (c + 1 < cells.size()) out += std::string(width[c] - cells[c].size() + 2, ' ');
    }
    std::cout << out << "\n";
  };
  line(header, false);
  for (const auto& row : rows) line(row, true);
}

std::string Str(const nlohmann::json& j, const char* key) {
  if (!j.contains(key)) return "-";
  const auto& v = j[key];
  if (v.is_string()) return v.get<std::string>().empty() ? "-" : v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  return v.dump();
}

void Services(const CtlArgs& args) {
  const auto reply = Call(Client(args), "GET", "/v1/services");
  if (args.json) {
    std::cout << reply.dump(2) << "\n";
    return;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : reply["services"]) {
    rows.push_back({Str(s, "name"), Str(s, "instances"), Str(s, "ready"), Str(s, "degraded")});
  }
  PrintTable({"SERVICE", "INSTANCES", "READY", "DEGRADED"}, rows);
  std::cout << "revision " << reply["revision"]
            << (reply.value("degraded", false) ? " (DEGRADED)" : "") << "\n";
}

// The deploy history (RO-4), newest first: the registry's, or with --agent, what an agent keeps.
void Deploys(const CtlArgs& args) {
  CtlArgs source = args;
  source.id.clear();
  if (!args.deploys_agent.empty()) source.registry = args.deploys_agent;
  const std::string query = args.service.empty() ? "" : "?service=" + args.service;
  const std::string peer = args.deploys_agent.empty() ? "registry" : "agent";
  const auto reply = Call(Client(source, peer), "GET", "/v1/deploys" + query, {}, peer);
  if (args.json) {
    std::cout << reply.dump(2) << "\n";
    return;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& entry : reply["deploys"]) {
    // The registry wraps each record with its id, version and whether it is running.
    const auto& d = entry.contains("record") ? entry["record"] : entry;
    std::string decided = "-";
    if (d.contains("decided_after_s") && d["decided_after_s"].is_number()) {
      char text[32];
      std::snprintf(text, sizeof text, "%.1f s", d["decided_after_s"].get<double>());
      decided = text;
    }
    std::string verdict = Str(d, "verdict");
    if (entry.value("active", false)) verdict += " (running)";
    rows.push_back({entry.contains("record") ? Str(entry, "id") : Str(d, "id"), Str(d, "service"),
                    Str(d, "version"), verdict, decided, Str(d, "reason")});
  }
  PrintTable({"DEPLOY", "SERVICE", "VERSION", "VERDICT", "DECIDED AFTER", "REASON"}, rows);
}

void List(const CtlArgs& args) {
  const auto reply = Call(Client(args), "GET", "/v1/services/" + args.service + "/instances");
  if (args.json) {
    std::cout << reply.dump(2) << "\n";
    return;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& in : reply["instances"]) {
    rows.push_back({Str(in, "id"), Str(in, "address"), Str(in, "state"), Str(in, "accepting"),
                    Str(in, "generation"), Str(in, "weight"), Str(in, "zone"), Str(in, "version")});
  }
  PrintTable({"ID", "ADDRESS", "STATE", "ACCEPTING", "GENERATION", "WEIGHT", "ZONE", "VERSION"},
             rows);
  std::cout << "revision " << reply["revision"]
            << (reply.value("degraded", false)
                    ? "  DEGRADED: self-preservation is holding back expiry"
                    : "")
            << "\n";
}

void Watch(const CtlArgs& args) {
  std::string target = "/v1/watch?from=" + std::to_string(args.from);
  if (!args.service.empty()) target += "&service=" + args.service;
  std::uint64_t seen = 0;
  const auto reply = Client(args).Stream(target, [&](std::string_view line) {
    if (args.json) {
      std::cout << line << std::endl;
    } else {
      const auto e = nlohmann::json::parse(line, nullptr, false);
      if (e.is_discarded()) return true;
      const std::string type = e.value("type", "");
      std::cout << e.value("revision", std::uint64_t{0}) << "  " << type;
      if (e.contains("instance")) {
        const auto& in = e["instance"];
        std::cout << "  " << Str(in, "service") << "/" << Str(in, "id") << "  "
                  << Str(in, "address") << "  " << Paint(Str(in, "state")) << "  gen "
                  << Str(in, "generation");
      }
      if (e.contains("reason")) std::cout << "  reason " << Str(e, "reason");
      if (e.contains("instances")) std::cout << "  " << e["instances"].size() << " instances";
      if (e.value("degraded", false)) std::cout << "  DEGRADED";
      std::cout << std::endl;
    }
    return args.count == 0 || ++seen < args.count;
  });
  if (!reply.ok()) Unreachable(reply.status());
  if (reply->status != 200) Refused(*reply);
}

// The versions READY instances of `service` run, with how many run each ("" for instances
// registered without one): what serves, which after a failed deploy is not the version last
// deployed. Null when the list could not be read (the status goes on without it).
nlohmann::json ServingVersions(const net::HttpClient& client, const std::string& service) {
  const auto list = rollout::RegistryInstances(client, service);
  if (!list.ok()) return nullptr;
  nlohmann::json count = nlohmann::json::object();
  for (const auto& in : *list) {
    if (in.value("state", "") != "READY") continue;
    const std::string version = in.value("version", "");
    count[version] = count.value(version, 0) + 1;
  }
  return count;
}

// "v2 (3), v1 (1)", most first; "unversioned" for ""; "?" when unknown.
std::string ServingCell(const nlohmann::json& serving) {
  if (!serving.is_object()) return "?";
  std::vector<std::pair<int, std::string>> by_count;
  for (const auto& [version, n] : serving.items()) by_count.emplace_back(-n.get<int>(), version);
  std::sort(by_count.begin(), by_count.end());
  std::string out;
  for (const auto& [n, version] : by_count) {
    out += (out.empty() ? "" : ", ") + (version.empty() ? "unversioned" : version) + " (" +
           std::to_string(-n) + ")";
  }
  return out.empty() ? "-" : out;
}

// One screen for "is everything all right": the registry's readiness and revision, every
// service's READY count and the versions they serve, and the newest deploy per service.
void StatusCmd(const CtlArgs& args) {
  const net::HttpClient client = Client(args);
  auto ready = client.Send("GET", "/ready");
  if (!ready.ok()) Unreachable(ready.status());
  auto services = Call(client, "GET", "/v1/services");
  for (auto& s : services["services"]) {
    // A registry older than `ready_versions` is asked service by service.
    s["serving"] = s.contains("ready_versions") ? s["ready_versions"]
                                                : ServingVersions(client, s.value("name", ""));
  }
  // The newest deploy of each service (the registry lists newest first).
  std::map<std::string, nlohmann::json> latest;
  std::string deploys_note;
  if (auto reply = client.Send("GET", "/v1/deploys?limit=200");
      reply.ok() && reply->status == 200) {
    const auto deploys = nlohmann::json::parse(reply->body, nullptr, false);
    if (deploys.is_object() && deploys.contains("deploys")) {
      for (const auto& d : deploys["deploys"]) {
        latest.try_emplace(d.value("service", ""), d.value("record", nlohmann::json::object()));
      }
    }
  } else {
    deploys_note =
        reply.ok() ? "answered " + std::to_string(reply->status) : reply.status().message();
  }
  if (args.json) {
    nlohmann::json out = {{"registry",
                           {{"url", args.registry},
                            {"ready", ready->status == 200},
                            {"revision", services.value("revision", std::uint64_t{0})},
                            {"degraded", services.value("degraded", false)}}},
                          {"services", services["services"]},
                          {"latest_deploys", nlohmann::json::object()}};
    for (const auto& [service, d] : latest) out["latest_deploys"][service] = d;
    if (!deploys_note.empty()) out["deploys_error"] = deploys_note;
    std::cout << out.dump(2) << "\n";
    return;
  }
  std::cout << "registry " << args.registry << "  "
            << Paint(ready->status == 200 ? "READY" : "NOT READY") << "  revision "
            << services["revision"]
            << (services.value("degraded", false) ? "  " + Paint("DEGRADED") : "") << "\n\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : services["services"]) {
    const std::string name = Str(s, "name");
    std::string deploy = "-", verdict = "-";
    if (const auto it = latest.find(name); it != latest.end()) {
      deploy = Str(it->second, "version");
      verdict = Str(it->second, "verdict");
    }
    rows.push_back({name, Str(s, "ready") + "/" + Str(s, "instances"),
                    ServingCell(s.value("serving", nlohmann::json())), deploy, verdict});
  }
  PrintTable({"SERVICE", "READY", "SERVING", "LAST DEPLOYED", "VERDICT"}, rows);
  if (!deploys_note.empty())
    std::cout << "\n(no deploy history: the registry " << deploys_note << ")\n";
}

void PrintRevision(const CtlArgs& args, const nlohmann::json& reply, const std::string& what) {
  if (args.json) {
    std::cout << reply.dump() << "\n";
  } else {
    std::cout << what << " at revision " << reply["revision"] << "\n";
  }
}

// POST .../state with `change` (and the generation to write with), then says `done`.
void PostState(const CtlArgs& args, nlohmann::json change, const std::string& done) {
  const net::HttpClient client = Client(args);
  change["generation"] = Generation(client, args);
  PrintRevision(args, Call(client, "POST", InstancePath(args) + "/state", change.dump()),
                args.service + "/" + args.id + " " + done);
}

void Drain(const CtlArgs& args) { PostState(args, {{"state", "DRAINING"}}, "draining"); }

// accept / refuse: the instance's capacity flag, as a full server says it with
// ServerHost::SetAccepting; its state, lease and readiness stay as they are.
void SetAccepting(const CtlArgs& args, bool accepting) {
  PostState(args, {{"accepting", accepting}},
            accepting ? "accepts new connections" : "takes no new connections");
}

void Deregister(const CtlArgs& args) {
  const net::HttpClient client = Client(args);
  const std::uint64_t generation = Generation(client, args);
  PrintRevision(
      args,
      Call(client, "DELETE", InstancePath(args) + "?generation=" + std::to_string(generation)),
      args.service + "/" + args.id + " deregistered");
}

void Register(const CtlArgs& args) {
  nlohmann::json body = {{"address", args.address},
                         {"generation", args.generation.value_or(1)},
                         {"state", args.state},
                         {"ttl_ms", args.ttl_ms},
                         {"weight", args.weight}};
  if (!args.zone.empty()) body["zone"] = args.zone;
  if (!args.version.empty()) body["version"] = args.version;
  PrintRevision(args, Call(Client(args), "PUT", InstancePath(args), body.dump()),
                args.service + "/" + args.id + " registered");
}

}  // namespace

void AddCtlCommands(CLI::App& app) {
  auto args = std::make_shared<CtlArgs>();
  CLI::App* ctl = app.add_subcommand("ctl", "Operate a running registry over its HTTP API");
  ctl->require_subcommand(1);
  AddRegistryUrlOption(*ctl, args->registry);
  ctl->add_option("--token", args->token, "Bearer token (default: $DROVER_TOKEN)");
  ctl->add_option("--ca", args->ca_file,
                  "PEM CA certificates to trust for an https:// registry (default: the system's)")
      ->check(CLI::ExistingFile);
  ctl->add_flag("--json", args->json, "Print JSON instead of tables");

  ctl->add_subcommand("services", "List services with instance counts")->callback([args] {
    Services(*args);
  });
  auto* status = ctl->add_subcommand(
      "status",
      "The registry's health, each service's READY count, the versions its READY instances run "
      "(SERVING) and its latest deploy");
  status->callback([args] { StatusCmd(*args); });
  auto* deploys = ctl->add_subcommand(
      "deploys", "Deploy history (the registry's; running ones marked), newest first");
  deploys->add_option("service", args->service, "Only this service");
  deploys->add_option("--agent", args->deploys_agent,
                      "Read the history a drover agent keeps instead (its URL)");
  deploys->callback([args] { Deploys(*args); });
  auto* list = ctl->add_subcommand("list", "List the instances of a service");
  list->add_option("service", args->service, "Service name")->required();
  list->callback([args] { List(*args); });

  auto* watch = ctl->add_subcommand("watch", "Follow changes as they happen");
  watch->add_option("service", args->service, "Only this service");
  watch->add_option(
      "--from", args->from,
      "Resume after this revision (0: snapshot first); events of one revision can span lines, so "
      "after a --count stop, resume from the revision before the last one printed");
  watch->add_option("--count", args->count, "Stop after this many events");
  watch->callback([args] { Watch(*args); });

  auto* drain = ctl->add_subcommand(
      "drain", "Mark an instance DRAINING: no new traffic; heartbeats do not undo it");
  drain->add_option("service", args->service, "Service name")->required();
  drain->add_option("id", args->id, "Instance id")->required();
  drain->add_option("--generation", args->generation, "Generation (default: the current one)");
  drain->callback([args] { Drain(*args); });

  for (const bool accepting : {false, true}) {
    auto* cmd = ctl->add_subcommand(
        accepting ? "accept" : "refuse",
        accepting ? "Let an instance take new connections again (after refuse, or a full server "
                    "that has room)"
                  : "Send an instance no new connections (zone full) while it stays READY, keeps "
                    "its lease and its current sessions; the server's own SetAccepting does not "
                    "undo it until its answer changes");
    cmd->add_option("service", args->service, "Service name")->required();
    cmd->add_option("id", args->id, "Instance id")->required();
    cmd->add_option("--generation", args->generation, "Generation (default: the current one)");
    cmd->callback([args, accepting] { SetAccepting(*args, accepting); });
  }
  auto* dereg = ctl->add_subcommand("deregister", "Remove an instance (leaves a tombstone)");
  dereg->add_option("service", args->service, "Service name")->required();
  dereg->add_option("id", args->id, "Instance id")->required();
  dereg->add_option("--generation", args->generation, "Generation (default: the current one)");
  dereg->callback([args] { Deregister(*args); });

  auto* reg = ctl->add_subcommand("register", "Register (or update) an instance by hand");
  reg->add_option("service", args->service, "Service name")->required();
  reg->add_option("id", args->id, "Instance id")->required();
  reg->add_option("--address", args->address, "host:port")->required();
  reg->add_option("--generation", args->generation, "Generation (default 1)");
  reg->add_option("--state", args->state, "STARTING, READY or DRAINING")->capture_default_str();
  reg->add_option("--ttl-ms", args->ttl_ms, "Lease in ms")->capture_default_str();
  reg->add_option("--weight", args->weight, "Relative capacity")->capture_default_str();
  reg->add_option("--zone", args->zone, "Zone");
  reg->add_option("--version", args->version, "Version");
  reg->callback([args] { Register(*args); });
}

}  // namespace drover::cli

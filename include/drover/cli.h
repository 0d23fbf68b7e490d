// Exit codes and command-line parsing shared by `drover` and every program on the SDK that wants
// to exit the way Drover's tools do (the examples do). Header-only; it needs CLI11 (Debian
// libcli11-dev), which nothing else in the SDK does, so only programs that include it need it.
//
// Exit codes:
//   0  done
//   1  the other side refused (an error answer from the registry, an agent, a failed deploy)
//   2  bad usage: an unknown command or flag, a missing argument, a value out of range, a
//      config file that does not parse -- nothing was attempted
//   3  the other side could not be reached (connection refused, timeout, name not resolved)
// Commands with outcomes of their own (`drover deploy`) document codes above these.
#pragma once

#include <CLI/CLI.hpp>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "drover/status.h"

namespace drover::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRefused = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitUnreachable = 3;

// The exit code for a failure a program ends on: 0 for OK; kExitUnreachable for UNAVAILABLE and
// DEADLINE_EXCEEDED (something it needs did not answer); kExitUsage for INVALID_ARGUMENT (the
// options it was given cannot work); kExitRefused for the rest.
inline int ExitCodeOf(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return kExitOk;
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
      return kExitUnreachable;
    case StatusCode::kInvalidArgument:
      return kExitUsage;
    default:
      return kExitRefused;
  }
}

namespace detail {

// "drover ctl list": the names from the top-level app down to `app`.
inline std::string CommandPath(const CLI::App* app) {
  std::string path;
  for (const CLI::App* a = app; a != nullptr; a = a->get_parent()) {
    path = path.empty() ? a->get_name() : a->get_name() + " " + path;
  }
  return path;
}

// The command the parse reached: the last subcommand chosen at each level.
inline const CLI::App* Deepest(const CLI::App& app) {
  const CLI::App* at = &app;
  while (true) {
    const std::vector<CLI::App*> chosen = at->get_subcommands();
    if (chosen.empty()) return at;
    at = chosen.back();
  }
}

// The command a message is about: the one that owns the option it starts with ("--log-level:
// ..." is the top-level command's, whatever subcommand was reached), else `at`.
inline const CLI::App* OwnerOfOption(const CLI::App* at, const std::string& what) {
  if (!what.starts_with("--")) return at;
  const std::string name = what.substr(0, what.find_first_of(": ="));
  for (const CLI::App* a = at; a != nullptr; a = a->get_parent()) {
    if (a->get_option_no_throw(name) != nullptr) return a;
  }
  return at;
}

inline std::string SubcommandNames(const CLI::App* app) {
  std::string names;
  for (const CLI::App* sub : app->get_subcommands({})) {
    if (sub->get_name().empty() || sub->get_group().empty()) continue;  // hidden
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  return names;
}

}  // namespace detail

// Parses argv with `app` and runs the callbacks of what was chosen. Returns nullopt when that
// went through (the program goes on), else the code to exit with:
//   - 0 after --help or --version (printed);
//   - the code a callback threw as CLI::RuntimeError (the callback printed why);
//   - kExitUsage for every parse error (CLI11's own codes, 100+, never escape), printed on stderr
//     as "<command path>: <what>" naming the offending word or value, and how to get help.
inline std::optional<int> ParseCommandLine(CLI::App& app, int argc, const char* const* argv) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::Success& e) {  // --help, --help-all, --version
    return app.exit(e);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    const CLI::App* at = detail::Deepest(app);
    std::string what = e.what();
    // CLI11 says "A subcommand is required" without naming the word it could not place.
    if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr &&
        what.find("subcommand") != std::string::npos) {
      const std::vector<std::string> unplaced = at->remaining();
      const std::string names = detail::SubcommandNames(at);
      if (unplaced.empty()) {
        what = "a command is needed: one of " + names;
      } else if (unplaced.front().starts_with("-")) {
        what = "unknown option " + unplaced.front() + "; a command is needed: one of " + names;
      } else {
        what = "'" + unplaced.front() + "' is not a command here; one of " + names;
      }
    }
    const std::string path = detail::CommandPath(detail::OwnerOfOption(at, what));
    std::cerr << path << ": " << what << "\nRun '" << path << " --help' for the usage.\n";
    return kExitUsage;
  }
}

}  // namespace drover::cli

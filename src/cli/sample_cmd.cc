// `drover sample zone|whoami`: the sample servers of examples/ (a game zone server and seed 003's
// WhoAmI gRPC server, both on ServerHost), built into the binary so that `drover demo` can deploy
// them through the agent with nothing else installed. Everything after the server's name is its
// own flags (`drover sample zone --help`).
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "whoami_server_main.h"
#include "zone_server_main.h"

namespace drover::cli {
namespace {

void AddSample(CLI::App& parent, const std::string& name, const std::string& description,
               int (*run)(int, char**)) {
  CLI::App* cmd = parent.add_subcommand(name, description);
  cmd->prefix_command();
  cmd->set_help_flag();  // --help goes to the server's own parser
  cmd->callback([cmd, name, run] {
    std::vector<std::string> args = {"drover sample " + name};
    for (const std::string& a : cmd->remaining()) args.push_back(a);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (const int code = run(static_cast<int>(args.size()), argv.data()); code != 0) {
      throw CLI::RuntimeError(code);
    }
  });
}

}  // namespace

void AddSampleCommands(CLI::App& app) {
  CLI::App* sample = app.add_subcommand(
      "sample", "Sample servers on Drover's SDK, as the demo deploys them (see examples/)");
  sample->require_subcommand(1);
  AddSample(*sample, "zone",
            "A game zone server: warms up, registers when ready, serves HELLO/PING/QUIT lines, "
            "leaves discovery before closing on SIGTERM",
            &examples::ZoneServerMain);
  AddSample(*sample, "whoami",
            "A gRPC WhoAmI server on Drover's gRPC defaults that answers with its instance id",
            &examples::WhoamiServerMain);
}

}  // namespace drover::cli

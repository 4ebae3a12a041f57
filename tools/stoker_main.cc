// `stoker`: pack datasets, inspect and verify them.
#include <cstdio>

#include "tools/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"stoker: packed, checksummed datasets that keep GPUs fed", "stoker"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "stoker 0.1.0");
  int exit_code = stoker::cli::kExitOk;
  stoker::cli::RegisterPack(app, exit_code);
  stoker::cli::RegisterUpgrade(app, exit_code);
  stoker::cli::RegisterGc(app, exit_code);
  stoker::cli::RegisterCommit(app, exit_code);
  stoker::cli::RegisterCompact(app, exit_code);
  stoker::cli::RegisterInspect(app, exit_code);
  stoker::cli::RegisterVerify(app, exit_code);
  stoker::cli::RegisterShuffleReport(app, exit_code);
  stoker::cli::RegisterServe(app, exit_code);
  stoker::cli::RegisterNode(app, exit_code);
  stoker::cli::RegisterMount(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return stoker::cli::kExitUsage;
  }
  return exit_code;
}

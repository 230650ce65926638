// mla: one binary, many subcommands. Each subcommand lives in its own file in src/cli/ and
// registers itself on the CLI11 app; its callback does the work.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "parallel/world.h"
#include "util/error.h"

// NOLINTNEXTLINE(bugprone-exception-escape): a throw while registering options is a bug; terminate
int main(int argc, char** argv) {
  // Under mpirun: joins the MPI job (environment from rank 0, logs to rank 0); else nothing.
  const mla::World world(argc, argv);
  CLI::App app{"mla.cpp: inference server for Multi-head Latent Attention MoE models"};
  app.require_subcommand(1);
  mla::cli::register_version(app);
  mla::cli::register_gguf(app);
  mla::cli::register_tokenize(app);
  mla::cli::register_template(app);
  mla::cli::register_run(app);
  mla::cli::register_serve(app);
  mla::cli::register_perplexity(app);
  mla::cli::register_doctor(app);
  mla::cli::register_bench(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const mla::WorkerExit& e) {
    return e.code;  // rank 0 reported why
  } catch (const mla::Error& e) {
    if (mla::is_worker())
      std::fprintf(stderr, "mla: error: [rank %d] %s\n", mla::world().rank(), e.what());
    else
      std::fprintf(stderr, "mla: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mla: internal error: %s\n", e.what());
    return 1;
  }
  return mla::cli::exit_code();
}

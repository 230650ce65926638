#include <cstdio>

#include "cli/commands.h"
#include "parallel/world.h"

namespace mla::cli {

int& exit_code() {
  static int code = 0;
  return code;
}

void register_version(CLI::App& app) {
  auto* cmd = app.add_subcommand("version", "Print the mla.cpp version and build features");
  cmd->callback([] {
    std::printf("mla.cpp %s\n", MLA_VERSION);
#if defined(__AVX2__)
    std::printf("build: -march with AVX2\n");
#else
    std::printf("build: portable (SIMD kernels chosen at run time)\n");
#endif
    std::printf("multi-process: %s\n", mpi_build_info().c_str());
  });
}

}  // namespace mla::cli

// Catch's implementation (CATCH_CONFIG_RUNNER: everything but main), compiled once into kvx_catch_session.
#define CATCH_CONFIG_RUNNER
#include "tests/catch_session.h"

#include <catch2/catch.hpp>

namespace kvx::testing {

int run_catch_session(int argc, char* argv[]) { return Catch::Session().run(argc, argv); }

}  // namespace kvx::testing

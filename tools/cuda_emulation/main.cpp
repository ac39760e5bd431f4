#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>
#include "emu.h"
int main(int argc, char* argv[]) {
    const int rc = Catch::Session().run(argc, argv);
    std::printf("emulated kernel launches: %ld\n", emu_launch_count.load());
    return rc;
}

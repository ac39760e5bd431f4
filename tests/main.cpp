// The main of the test programs that need nothing before Catch runs (library kvx_catch_main).
#include "tests/catch_session.h"

int main(int argc, char* argv[]) { return kvx::testing::run_catch_session(argc, argv); }

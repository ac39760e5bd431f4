// Runs Catch's session for a test program's own main (the CUDA tests' and the SmolLM2 tests' mains decide
// first whether to skip). Catch's implementation is compiled once, in catch_session.cpp, for every test
// program: compiled into each main it cost about 27 s of compile per program, nine times per build.
#pragma once

namespace kvx::testing {

int run_catch_session(int argc, char* argv[]);

}  // namespace kvx::testing

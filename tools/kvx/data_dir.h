// Where kvx finds what it ships with, relative to its own binary: the data folder, <prefix>/share/kvx in an
// install and build/share/kvx in the build tree (the same layout, so either can be moved as a whole):
//
//   <data>/models/stories260K/   the built-in model (used when neither -m nor $KVX_MODEL names one)
//   <data>/python/kvx_tools/     the converter's Python package (kvx convert puts <data>/python first on
//                                PYTHONPATH)
#pragma once

#include <filesystem>

namespace kvx::cli {

// The folder of the running kvx, symlinks resolved: what data_dir and the CUDA plugin's path
// (cuda_plugin_loader.h) are relative to. Throws kvx::Error when the running binary cannot be found (no
// /proc/self/exe).
std::filesystem::path bin_dir();

// bin_dir()/KVX_DATA_FROM_BIN, normalised.
std::filesystem::path data_dir();

}  // namespace kvx::cli

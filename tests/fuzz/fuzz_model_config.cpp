// config.json of a model folder: every field by type and range, the products checked, the files it names
// confined to the folder (engine/model/model_config.cpp).
#include "engine/model/model_config.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace kvx;
    fuzz::scratch_file("config.json", fuzz::as_text(data, size));
    fuzz::accepted_or_refused([] {
        const ModelConfig c = load_model_config(fuzz::scratch_dir());
        // What the rest of kvx computes from a config it accepted must not overflow.
        volatile int64_t weights = int64_t{c.vocab_size} * c.dim + int64_t{c.n_layers} * c.q_dim() * c.dim;
        (void)weights;
    });
    return 0;
}

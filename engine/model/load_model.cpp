// load_model (model.h): a GGUF file goes to its own reader, anything else is a model folder.
#include "engine/model/gguf_model.h"
#include "engine/model/model.h"

namespace kvx {

Model load_model(const std::string& path, QuantLayout quant_layout) {
    return is_gguf_file(path) ? load_gguf_model(path, quant_layout) : load_model_folder(path);
}

}  // namespace kvx

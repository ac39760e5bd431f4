// The OpenAI API's request bodies for /v1/completions and /v1/chat/completions, read into a ServeRequest.
// Unknown fields are ignored; a field of the wrong type or out of range is an ApiError 400 naming it; a model
// other than the one served is a 404.
//
//   field              completions                  chat
//   prompt / messages  string, [ids], [string]      [{role, content: string | [{type: text, text}]}]
//   max_tokens         default 16                   default: the rest of the context (also max_completion_tokens)
//   temperature 0..2 (1), top_p (0, 1] (1), top_k >= 0 or -1 (0 = off), seed (random), n 1..max-seqs (1),
//   stop string | [string] (up to 16), stream, ignore_eos (vLLM's and llama.cpp's: no stop token)
//   logprobs           0..20: top alternatives      bool, with top_logprobs 0..20
#pragma once

#include <nlohmann/json.hpp>

#include "engine/serving/serve_request.h"
#include "served_model.h"

namespace kvx::serve {

enum class Endpoint { completions, chat };

struct ApiRequest {
    Endpoint endpoint = Endpoint::completions;
    ServeRequest serve;
    bool stream = false;
    bool logprobs = false;  // the answer carries a logprobs object per choice
};

// Throws ApiError.
ApiRequest parse_api_request(Endpoint endpoint, const nlohmann::json& body, const ServedModel& model);

}  // namespace kvx::serve

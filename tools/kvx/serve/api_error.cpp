#include "api_error.h"

#include <nlohmann/json.hpp>

namespace kvx::serve {

std::string ApiError::type() const {
    if (status_ == 401) return "authentication_error";
    if (status_ == 404) return "not_found_error";
    return status_ < 500 ? "invalid_request_error" : "server_error";
}

std::string ApiError::json() const {
    nlohmann::json error = {{"message", what()}, {"type", type()}, {"param", nullptr}, {"code", nullptr}};
    if (!param_.empty()) error["param"] = param_;
    if (!code_.empty()) error["code"] = code_;
    return nlohmann::json{{"error", error}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kvx::serve

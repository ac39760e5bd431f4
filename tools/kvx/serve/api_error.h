// An answer the OpenAI API gives as an error object with an HTTP status: what request parsing throws and the
// server writes as {"error": {"message", "type", "param", "code"}}.
#pragma once

#include <stdexcept>
#include <string>

namespace kvx::serve {

class ApiError : public std::runtime_error {
public:
    ApiError(int status, std::string message, std::string param = {}, std::string code = {})
        : std::runtime_error(message), status_(status), param_(std::move(param)), code_(std::move(code)) {}
    int status() const { return status_; }
    const std::string& param() const { return param_; }
    const std::string& code() const { return code_; }
    // invalid_request_error for 4xx, as OpenAI types them; server_error otherwise.
    std::string type() const;
    std::string json() const;

private:
    int status_;
    std::string param_;
    std::string code_;
};

}  // namespace kvx::serve

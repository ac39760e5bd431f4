// ServingMetrics as Prometheus text (exposition format 0.0.4): what GET /metrics answers.
#pragma once

#include <string>

#include "engine/serving/serving_metrics.h"

namespace kvx::serve {

std::string prometheus_text(const ServingMetrics& metrics);

}  // namespace kvx::serve

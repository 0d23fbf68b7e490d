// `drover bench router`'s report of an Evaluation (evaluation.h): a text table for people, one
// JSON object for scripts.
#pragma once

#include <nlohmann/json.hpp>

#include "demo/evaluation.h"

namespace drover::demo {

nlohmann::json EvaluationJson(const Evaluation& evaluation);

// The text report, on stdout.
void PrintEvaluation(const Evaluation& evaluation);

}  // namespace drover::demo

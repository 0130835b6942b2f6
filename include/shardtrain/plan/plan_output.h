// The plan as a text table, CSV, JSON and a PNG chart of scaling efficiency.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shardtrain/plan/planner.h"

namespace shardtrain::plan {

std::string plan_table(const PlanInput& in, const std::vector<PlanRow>& rows);
std::string plan_csv(const std::vector<PlanRow>& rows);
nlohmann::json plan_json(const PlanInput& in, const std::vector<PlanRow>& rows);
void plan_png(const std::string& path, const PlanInput& in, const std::vector<PlanRow>& rows);

}  // namespace shardtrain::plan

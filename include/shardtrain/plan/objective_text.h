// The plan's words on --objective dpo (plan/objective.h): its part of the header and the line
// under the table.
#pragma once
#include <string>
#include <vector>

#include "shardtrain/plan/planner.h"

namespace shardtrain::plan {

// For the plan's header: ", DPO (...)", or "" for SFT.
std::string describe_objective(const PlanInput& in);
// The line under the table: rows, head and reference, with the best row's figures ("" for SFT).
std::string objective_line(const PlanInput& in, const std::vector<PlanRow>& rows);

}  // namespace shardtrain::plan

// TensorBoard's Event records, serialized: the only code that sees the protobuf messages. It
// builds apart from LibTorch, whose headers carry an older protobuf of their own.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace shardtrain::obs::tb_events {

std::string file_version(double wall_time);  // "brain.Event:2": an event file's first record
// A session start: TensorBoard's reader drops what earlier files of the run logged from step on.
std::string session_start(double wall_time, int64_t step);
std::string scalars(double wall_time, int64_t step,
                    const std::vector<std::pair<std::string, double>>& values);
std::string text(double wall_time, int64_t step, const std::string& tag,
                 const std::string& markdown);
// The HParams plugin's experiment (hparams' names and types, the metrics compared) and session
// start info (hparams' values): hparams flat, name -> number, string or bool (others left out).
std::vector<std::string> hparams(double wall_time, int64_t step, double start_time,
                                 const nlohmann::json& hparams,
                                 const std::vector<std::string>& metrics, const std::string& group);
std::string session_end(double wall_time, int64_t step, bool success);

}  // namespace shardtrain::obs::tb_events

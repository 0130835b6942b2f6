#include "shardtrain/cli/engine_setup.h"

#include "shardtrain/runtime/logging.h"

namespace shardtrain::cli {

EngineSetup::EngineSetup(const ModelConfig& model, const fsdp::FsdpConfig& cfg, MpiEnv& env, const std::string& path,
                         uint64_t seed)
    : device(choose_device(cfg.device, env)),
      groups(fsdp::make_process_groups(cfg, env.topology(), device.cuda, env.host())),
      weights(path.empty() ? nullptr : std::make_unique<SafetensorsModel>(path)) {
  const at::Device dev = device.cuda ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device.index)) : at::Device(at::kCPU);
  engine = std::make_unique<fsdp::FsdpEngine>(model, cfg, groups, seed, weights.get(), dev);
  if (weights) log::info("loaded " + std::to_string(weights->bytes_read()) + " bytes of weights from " + path);
}

}  // namespace shardtrain::cli

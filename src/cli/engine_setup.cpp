#include "shardtrain/cli/engine_setup.h"

#include "shardtrain/comm/mesh.h"
#include "shardtrain/model/params.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/logging.h"
#ifdef SHARDTRAIN_HAVE_CUDA
#include "shardtrain/cuda/device_memory.h"
#endif

#include <ATen/Context.h>

namespace shardtrain::cli {

comm::GroupLayout mesh_layout(const fsdp::ShardingConfig& cfg, int context_parallel,
                              const runtime::Topology& topo) {
  return comm::with_experts(
      comm::with_context(fsdp::group_layout(cfg.sharding, topo, cfg.shard_group_size), topo,
                         context_parallel),
      cfg.expert_parallel);
}

EngineSetup::EngineSetup(const model::ModelConfig& model, const fsdp::ShardingConfig& cfg,
                         const model::RunPlan& run, int context_parallel, runtime::MpiEnv& env,
                         const std::string& path, uint64_t seed, const std::string& adapter_dir)
    : device(comm::choose_device(cfg.device, env)),
      groups(comm::make_parallel_dims(mesh_layout(cfg, context_parallel, env.topology()),
                                      env.topology(), device.cuda, env.host())),
      weights(path.empty() ? nullptr : std::make_unique<io::SafetensorsModel>(path)),
      adapter(adapter_dir.empty() ? nullptr
                                  : std::make_unique<io::SafetensorsModel>(
                                        adapter_dir + "/adapter_model.safetensors")) {
  if (weights) {  // every rank reads the same headers, so every rank throws alike
    try {
      model::check_weights(model, *weights);
    } catch (const runtime::UsageError& e) {
      throw runtime::AgreedUsageError(e.what());
    }
  }
  const at::Device dev = device.cuda
                             ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device.index))
                             : at::Device(at::kCPU);
  // TF32 for fp32 matmuls on CUDA, as torch.set_float32_matmul_precision("high"); CPU untouched.
  if (device.cuda) at::globalContext().setFloat32MatmulPrecision(run.tf32 ? "high" : "highest");
  engine = std::make_unique<fsdp::FsdpEngine>(fsdp::EngineSpec{model, cfg, run, dev}, groups, seed,
                                              weights.get(), adapter.get());
#ifdef SHARDTRAIN_HAVE_CUDA
  if (device.cuda) cuda::reset_peak_memory(device.index);  // peaks count training, not the build
#endif
  if (weights)
    runtime::log::info("loaded " + std::to_string(weights->bytes_read()) +
                       " bytes of weights from " + path);
}

}  // namespace shardtrain::cli

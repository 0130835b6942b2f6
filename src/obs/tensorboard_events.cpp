#include "shardtrain/obs/tensorboard_events.h"

#include "obs/proto/tensorboard_event.pb.h"
#include "obs/proto/tensorboard_hparams.pb.h"

namespace shardtrain::obs::tb_events {
namespace {

namespace tb = shardtrain::obs::tensorboard;
namespace hp = shardtrain::obs::tensorboard::hparams;

tb::Event event_at(double wall_time, int64_t step) {
  tb::Event e;
  e.set_wall_time(wall_time);
  e.set_step(step);
  return e;
}

// The HParams plugin's summaries hold their message in the metadata and an empty float tensor.
std::string hparams_event(double wall_time, int64_t step, const char* tag,
                          const hp::HParamsPluginData& data) {
  tb::Event e = event_at(wall_time, step);
  tb::Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  auto* plugin = v->mutable_metadata()->mutable_plugin_data();
  plugin->set_plugin_name("hparams");
  plugin->set_content(data.SerializeAsString());  // version 0, the plugin's current
  v->mutable_tensor()->set_dtype(tb::DT_FLOAT);
  v->mutable_tensor()->mutable_tensor_shape()->add_dim()->set_size(0);
  return e.SerializeAsString();
}

}  // namespace

std::string file_version(double wall_time) {
  tb::Event e = event_at(wall_time, 0);
  e.set_file_version("brain.Event:2");  // version 2: the reader purges on session starts
  return e.SerializeAsString();
}

std::string session_start(double wall_time, int64_t step) {
  tb::Event e = event_at(wall_time, step);
  e.mutable_session_log()->set_status(tb::SessionLog::START);
  return e.SerializeAsString();
}

std::string scalars(double wall_time, int64_t step,
                    const std::vector<std::pair<std::string, double>>& values) {
  tb::Event e = event_at(wall_time, step);
  for (const auto& [tag, value] : values) {
    tb::Summary::Value* v = e.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  return e.SerializeAsString();
}

std::string text(double wall_time, int64_t step, const std::string& tag,
                 const std::string& markdown) {
  tb::Event e = event_at(wall_time, step);
  tb::Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  v->mutable_metadata()->mutable_plugin_data()->set_plugin_name(
      "text");  // content: TextPluginData version 0, empty
  tb::TensorProto* t = v->mutable_tensor();
  t->set_dtype(tb::DT_STRING);
  t->mutable_tensor_shape();  // no dimensions: one string
  t->add_string_val(markdown);
  return e.SerializeAsString();
}

std::vector<std::string> hparams(double wall_time, int64_t step, double start_time,
                                 const nlohmann::json& hparams,
                                 const std::vector<std::string>& metrics,
                                 const std::string& group) {
  hp::HParamsPluginData experiment;
  hp::Experiment* x = experiment.mutable_experiment();
  x->set_time_created_secs(start_time);
  hp::HParamsPluginData session;
  hp::SessionStartInfo* s = session.mutable_session_start_info();
  s->set_group_name(group);
  s->set_start_time_secs(start_time);
  for (const auto& [name, value] : hparams.items()) {
    google::protobuf::Value pv;
    hp::DataType type;
    if (value.is_boolean()) {
      pv.set_bool_value(value.get<bool>());
      type = hp::DATA_TYPE_BOOL;
    } else if (value.is_number()) {
      pv.set_number_value(value.get<double>());
      type = hp::DATA_TYPE_FLOAT64;
    } else if (value.is_string()) {
      pv.set_string_value(value.get<std::string>());
      type = hp::DATA_TYPE_STRING;
    } else {
      continue;  // the plugin takes scalars only
    }
    (*s->mutable_hparams())[name] = pv;
    hp::HParamInfo* info = x->add_hparam_infos();
    info->set_name(name);
    info->set_type(type);
  }
  for (const std::string& tag : metrics) {
    hp::MetricInfo* m = x->add_metric_infos();
    m->mutable_name()->set_tag(tag);  // group "": the scalars lie in the session's own run
    m->set_dataset_type(tag.rfind("val_", 0) == 0 ? hp::DATASET_VALIDATION : hp::DATASET_TRAINING);
  }
  return {hparams_event(wall_time, step, "_hparams_/experiment", experiment),
          hparams_event(wall_time, step, "_hparams_/session_start_info", session)};
}

std::string session_end(double wall_time, int64_t step, bool success) {
  hp::HParamsPluginData end;
  end.mutable_session_end_info()->set_status(success ? hp::STATUS_SUCCESS : hp::STATUS_FAILURE);
  end.mutable_session_end_info()->set_end_time_secs(wall_time);
  return hparams_event(wall_time, step, "_hparams_/session_end_info", end);
}

}  // namespace shardtrain::obs::tb_events

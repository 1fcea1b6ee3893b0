// trainer.json reading and writing (format 1).
#include "engine/train/trainer_state.h"

#include <cstring>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"

namespace flotilla {

std::string trainer_state_to_json(const TrainerState& s) {
  nlohmann::json j;
  j["format"] = 1;
  j["step"] = s.step;
  j["tokens"] = s.tokens;
  uint64_t spare_bits = 0;
  std::memcpy(&spare_bits, &s.rng.spare, sizeof spare_bits);
  j["rng"] = {{"s", {s.rng.s[0], s.rng.s[1], s.rng.s[2], s.rng.s[3]}},
              {"has_spare", s.rng.has_spare},
              {"spare_bits", spare_bits}};
  j["train_cursor"] = s.train_cursor;
  j["best_val_loss"] = static_cast<double>(s.best_val_loss);
  j["last_save_seconds"] = s.last_save_seconds;
  j["world_size"] = s.world_size;
  j["zero"] = s.zero;
  j["parallel"] = {{"dp", s.dp > 0 ? s.dp : s.world_size}, {"tp", s.tp}, {"pp", s.pp}};
  j["config"] = nlohmann::json::parse(s.config_json.empty() ? "{}" : s.config_json);
  j["config_toml"] = s.config_toml;
  j["engine_version"] = s.engine_version;
  if (!s.base_weights.empty()) j["lora_base"] = {{"model", s.base_model}, {"weights", s.base_weights}};
  if (s.best_task_step >= 0)
    j["keep_best"] = {
        {"metric", s.best_task_metric}, {"step", s.best_task_step}, {"value", s.best_task_value}};
  return j.dump(2);
}

TrainerState parse_trainer_state(const std::string& text, const std::string& source) {
  TrainerState s;
  try {
    const auto j = nlohmann::json::parse(text);
    s.step = j.at("step").get<int64_t>();
    s.tokens = j.at("tokens").get<int64_t>();
    const auto& r = j.at("rng");
    for (size_t i = 0; i < 4; ++i) s.rng.s[i] = r.at("s").at(i).get<uint64_t>();
    s.rng.has_spare = r.at("has_spare").get<uint64_t>();
    const uint64_t spare_bits = r.at("spare_bits").get<uint64_t>();
    std::memcpy(&s.rng.spare, &spare_bits, sizeof spare_bits);
    s.train_cursor = j.at("train_cursor").get<std::vector<int64_t>>();
    s.best_val_loss = static_cast<float>(j.at("best_val_loss").get<double>());
    s.last_save_seconds = j.value("last_save_seconds", -1.0);
    s.world_size = j.value("world_size", 1);
    s.zero = j.value("zero", 0);
    s.dp = s.world_size;  // files from before tensor/pipeline parallelism: pure data parallel
    if (const auto par = j.find("parallel"); par != j.end()) {
      s.dp = par->value("dp", s.world_size);
      s.tp = par->value("tp", 1);
      s.pp = par->value("pp", 1);
    }
    s.config_json = j.at("config").dump();
    s.config_toml = j.value("config_toml", "");
    s.engine_version = j.value("engine_version", "");
    if (const auto base = j.find("lora_base"); base != j.end()) {
      s.base_model = base->at("model").get<std::string>();
      s.base_weights = base->at("weights").get<std::string>();
    }
    if (const auto kb = j.find("keep_best"); kb != j.end()) {
      s.best_task_metric = kb->at("metric").get<std::string>();
      s.best_task_step = kb->at("step").get<int64_t>();
      s.best_task_value = kb->at("value").get<double>();
    }
  } catch (const nlohmann::json::exception& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, ...": keep the detail only.
    std::string detail = e.what();
    if (const auto close = detail.find("] ");
        detail.rfind("[json.exception", 0) == 0 && close != std::string::npos)
      detail = detail.substr(close + 2);
    const char* what = dynamic_cast<const nlohmann::json::parse_error*>(&e)
                           ? "is not valid JSON"
                           : "lacks a field or has a wrong type";
    throw_checkpoint(source + "/trainer.json " + what + " (" + detail +
                     "); the checkpoint is damaged or from another version");
  }
  return s;
}

}  // namespace flotilla

// Differences between two resolved configs, for --resume: the model (input, classes, layers,
// loss), the optimizer, the batch size and the schedule must match the checkpoint's, else the
// resume is refused with every difference listed; any other change (epochs, paths, workers,
// logging, checkpoint policy) is applied and logged as an override.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "config/model_spec.h"

namespace cnn {

// "a.b[2].c" -> scalar text, for every scalar of the tree.
std::map<std::string, std::string> flatten_config(const Value& node);

struct ConfigDifference {
  std::string key, before, after;  // before/after "<absent>" when missing
};
std::vector<ConfigDifference> diff_configs(const Value& before, const Value& after);

// Throws ConfigError listing the incompatible differences; logs the safe ones. `now` must be
// resolved the way the checkpoint's config was (parsed, and its graph built, which writes every
// layer default into the tree); compared before the data is read, class names the data will supply
// (`classes` absent now) are left to the check after the data is read (`after_data`), which logs
// nothing.
enum class ResumeCheck { before_data, after_data };
void check_resume_compatible(const std::string& checkpoint_config_yaml, const ModelSpec& now,
                             ResumeCheck when = ResumeCheck::before_data);

}  // namespace cnn

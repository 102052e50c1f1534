// apply_override: the CLI's --set KEY=VALUE, on the parsed tree before the schema checks it.
// Trap: a digit segment means an index only inside a list ("layers.0"); inside a map it is a key.
// Every error names "<--set>" and the whole assignment, since the user has no file line to look at.
#include "config/value.h"

#include <cctype>
#include <charconv>

namespace cnn {

namespace {

ConfigError set_error(const std::string& assignment, const std::string& key, const std::string& message) {
  return ConfigError(Location{"<--set>", 0, 0}, key, fmt::format("{} (in --set {})", message, assignment));
}

bool all_digits(const std::string& s, size_t from, size_t to) {
  if (from >= to) return false;
  for (size_t i = from; i < to; ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

struct Step {
  std::string key;       // a map key, a list index or a list item's `name`
  bool bracket = false;  // written as [N]: an index, nothing else
};

// "layers[0].filters" -> layers, [0], filters; "layers.0.filters" -> layers, 0, filters.
std::vector<Step> parse_path(const std::string& key, const std::string& assignment) {
  std::vector<Step> steps;
  size_t start = 0;
  while (true) {
    size_t dot = key.find('.', start);
    std::string seg = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    size_t br = seg.find('[');
    if (br == 0 || seg.empty()) throw set_error(assignment, key, fmt::format("empty key in path '{}'", key));
    steps.push_back({seg.substr(0, br), false});
    while (br != std::string::npos) {
      size_t close = seg.find(']', br);
      if (close == std::string::npos || !all_digits(seg, br + 1, close) ||
          (close + 1 < seg.size() && seg[close + 1] != '['))
        throw set_error(assignment, key, fmt::format("malformed index in '{}': expected name[N]", seg));
      steps.push_back({seg.substr(br + 1, close - br - 1), true});
      br = close + 1 < seg.size() ? close + 1 : std::string::npos;
    }
    if (dot == std::string::npos) return steps;
    start = dot + 1;
  }
}

// The index of a list item: a number, or the item map whose `name` is step.key.
size_t find_item(const Value& list, const Step& step, const std::string& walked, const std::string& key,
                 const std::string& assignment) {
  size_t n = list.items().size();
  if (all_digits(step.key, 0, step.key.size())) {
    size_t index = n;
    auto r = std::from_chars(step.key.data(), step.key.data() + step.key.size(), index);
    if (r.ec != std::errc() || index >= n)
      throw set_error(assignment, key,
                      fmt::format("index {} is out of range: '{}' has {} items", step.key, walked, n));
    return index;
  }
  std::vector<std::string> names;
  for (size_t i = 0; i < n; ++i) {
    if (!list.items()[i].is_map()) continue;
    for (const auto& [k, v] : list.items()[i].entries()) {
      if (k != "name" || !v.is_scalar()) continue;
      if (v.text() == step.key) return i;
      names.push_back(v.text());
    }
  }
  throw set_error(assignment, key,
                  fmt::format("'{}' has no item named '{}'{}", walked, step.key, did_you_mean(step.key, names)));
}

}  // namespace

void apply_override(Value& root, const std::string& assignment) {
  size_t eq = assignment.find('=');
  std::string key = assignment.substr(0, eq == std::string::npos ? assignment.size() : eq);
  while (!key.empty() && std::isspace(static_cast<unsigned char>(key.back()))) key.pop_back();
  while (!key.empty() && std::isspace(static_cast<unsigned char>(key.front()))) key.erase(0, 1);
  if (eq == std::string::npos || key.empty())
    throw ConfigError(Location{"<--set>", 0, 0}, "",
                      fmt::format("malformed override '{}': expected KEY=VALUE, e.g. train.optimizer.lr=0.05",
                                  assignment));
  Value value;
  try {
    value = parse_yaml(assignment.substr(eq + 1), "<--set>");
  } catch (const ConfigError& e) {
    throw set_error(assignment, key, "the value is not valid YAML: " + e.message());
  }
  value.set_location_recursive(Location{"<--set>", 0, 0});

  std::vector<Step> steps = parse_path(key, assignment);
  Value* cur = &root;
  std::string walked;  // the path so far, as the user wrote it
  for (size_t s = 0; s < steps.size(); ++s) {
    const Step& step = steps[s];
    bool last = s + 1 == steps.size();
    if ((cur->is_map() || cur->is_null()) && !step.bracket) {
      if (last) {
        cur->set(step.key, std::move(value));
        return;
      }
      Value* child = nullptr;
      for (auto& e : cur->mutable_entries())
        if (e.first == step.key) child = &e.second;
      cur = child ? child : &cur->set(step.key, Value::map(Location{"<--set>", 0, 0}));
    } else if (cur->is_list()) {
      size_t index = find_item(*cur, step, walked, key, assignment);
      if (last) {
        value.set_path_recursive(item_path(cur->path(), index));
        cur->mutable_items()[index] = std::move(value);
        return;
      }
      cur = &cur->mutable_items()[index];
    } else {
      throw set_error(assignment, key, fmt::format("cannot set '{}': '{}' is {}, not {}", key, walked,
                                                   cur->describe(), step.bracket ? "a list" : "a map"));
    }
    walked = walked.empty() ? step.key : walked + (step.bracket ? "[" + step.key + "]" : "." + step.key);
  }
}

}  // namespace cnn

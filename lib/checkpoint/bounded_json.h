// JSON from hostile files (a safetensors header, the JSON held in checkpoint metadata strings)
// parsed in linear time with a nesting limit and a cap on the values built, rejecting duplicate keys.
// Trap: nlohmann::json::parse with a callback rescans the parent object at every object end
// (quadratic in the number of tensors), dumping, copying or comparing a value recurses once a
// level, and a value takes up to ~20 times its text in memory (`[],` is 3 bytes of text and ~60 of
// DOM): only a depth and a value count bounded while parsing keep those safe. Use this, never
// json::parse, on anything read from a checkpoint.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace cnn {

struct JsonLimits {
  int max_depth = 0;      // nesting of objects and arrays: a scalar is depth 0, {"a": 1} depth 1
  size_t max_values = 0;  // values built, of every kind (objects and arrays count once, and so
                          // does each member and element): bounds the memory of what is built
};

// Parses `text` as one JSON value. Throws cnn::Error "<what> ..." when it is not valid JSON, nests
// deeper than limits.max_depth, holds more than limits.max_values values, or repeats a key within
// one object (nlohmann would silently keep the last). With `shared_count`, several parses share the
// one cap (the JSON values of one file's metadata, parsed one by one and kept together): the values
// counted there before count against it, and this parse's are added.
nlohmann::json parse_bounded_json(const std::string& text, const JsonLimits& limits, const std::string& what,
                                  size_t* shared_count = nullptr);

// A JSON object read one member at a time, for an object of many members (a safetensors header):
// for each member in text order, `wants(key)` says whether to build its value; a wanted value is
// built under `limits` (depth and values counted over the whole text, the object being level 1),
// passed to `take(key, value)` and dropped, so only one member's value is held at a time. A value
// not wanted is scanned and never built (nothing is allocated for it), so a caller that stops
// wanting members past a cap still counts the rest in linear time. Throws like parse_bounded_json,
// also when `text` is not an object; duplicate keys are refused among the wanted members. What
// `wants` or `take` throw passes through.
void parse_bounded_json_members(const std::string& text, const JsonLimits& limits, const std::string& what,
                                const std::function<bool(const std::string& key)>& wants,
                                const std::function<void(const std::string& key, nlohmann::json&& value)>& take);

}  // namespace cnn

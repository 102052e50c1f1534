// JSON from hostile files (a safetensors header, the JSON held in checkpoint metadata strings)
// parsed in linear time with a nesting limit, rejecting duplicate keys.
// Trap: nlohmann::json::parse with a callback rescans the parent object at every object end
// (quadratic in the number of tensors), and dumping, copying or comparing a value recurses once a
// level: only a depth bounded when parsing keeps those safe. Use this, never json::parse, on
// anything read from a checkpoint.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace cnn {

// Parses `text` as one JSON value. Throws cnn::Error "<what>: ..." when it is not valid JSON,
// nests objects and arrays deeper than `max_depth` levels (a scalar is depth 0, {"a": 1} depth 1),
// or repeats a key within one object (nlohmann would silently keep the last).
nlohmann::json parse_bounded_json(const std::string& text, int max_depth, const std::string& what);

}  // namespace cnn

// The Markdown reference of every model-file key, generated from the schema declarations
// (`cnn-train validate --keys`; README.md holds a copy that a test compares with this output).
// Trap: the output must not depend on the build (CUDA or not), or the README copy could match
// only one of them; so nothing here lists what a build has (algorithm names, devices).
#include <set>

#include "config/model_spec.h"

namespace cnn {

namespace {

std::string cell(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

std::string default_text(const Key& k) {
  if (!k.default_note.empty()) return k.default_note;
  if (k.is_required) return "required";
  if (!k.same_as.empty()) return "= `" + k.same_as + "`";
  if (!k.fallback) return k.type.kind() == Type::Kind::map ? "" : "-";
  std::string text = to_yaml(*k.fallback);
  text.pop_back();  // the newline
  return "`" + text + "`";
}

void row(std::string& out, const std::string& path, const Key& k, const std::string& only) {
  std::string meaning = k.meaning;
  if (!only.empty()) meaning += " (" + only + ")";
  out += fmt::format("| `{}` | {} | {} | {} |\n", path, cell(k.type.reference()), cell(default_text(k)), cell(meaning));
}

// Rows of one map's keys (common first, then each variant key once, saying which variants take
// it), recursing into nested maps; notes collected for after the table.
void rows(std::string& out, std::vector<std::string>& notes, const Schema& s, const std::string& prefix) {
  if (!s.note().empty()) notes.push_back(fmt::format("**`{}`**: {}", prefix, s.note()));
  for (const Key& k : s.keys()) {
    const std::string path = child_path(prefix, k.name);
    row(out, path, k, "");
    if (k.type.kind() == Type::Kind::map) rows(out, notes, *k.type.schema(), path);
  }
  std::set<std::string> done;
  for (const std::string& v : s.variants()) {
    for (const Key& k : s.keys_for(v)) {
      if (s.find(k.name) || !done.insert(k.name).second) continue;
      std::vector<std::string> users;
      for (const std::string& other : s.variants())
        for (const Key& ok : s.keys_for(other))
          if (ok.name == k.name) users.push_back(other);
      row(out, child_path(prefix, k.name), k, fmt::format("{}: {}", s.discriminator(), join_words(users)));
    }
  }
}

}  // namespace

std::string model_reference_markdown(const LayerSchemas& layers) {
  std::shared_ptr<const Schema> top = model_schema(layers);
  std::string out;
  std::vector<std::string> notes;
  out += "Every key of a model file, with its type and allowed values, its default (written into the run's\n"
         "`config.yaml` when absent) and its meaning. Keys marked `type: x` apply to that type only.\n\n";
  out += "| key | type and allowed values | default | meaning |\n|---|---|---|---|\n";
  for (const Key& k : top->keys()) {
    if (k.name == "layers") {
      row(out, "layers", k, "");
      continue;
    }
    row(out, k.name, k, "");
    if (k.type.kind() == Type::Kind::map) rows(out, notes, *k.type.schema(), k.name);
  }
  out += "\n";
  for (const std::string& n : notes) out += n + "\n\n";

  const Schema& layer = *top->find("layers")->type.item().schema();
  out += "Every layer takes these keys:\n\n| key | type and allowed values | default | meaning |\n|---|---|---|---|\n";
  for (const Key& k : layer.keys()) row(out, k.name, k, "");
  out += "\nand the keys of its type:\n\n| type | key | type and allowed values | default | meaning |\n|---|---|---|---|---|\n";
  for (const auto& [type, own] : layers) {
    out += fmt::format("| `{}` | | | | {} |\n", type, cell(own.summary()));
    for (const Key& k : own.keys())
      out += fmt::format("| | `{}` | {} | {} | {} |\n", k.name, cell(k.type.reference()), cell(default_text(k)),
                         cell(k.meaning));
  }
  out += fmt::format(
      "\nLimits of the reader: a model file is a regular file (not a FIFO or device) of at most {} MiB of UTF-8\n"
      "text, with at most {} YAML nodes, aliases expanding to at most {} nodes in all, nesting at most {}\n"
      "deep, at most {} layers; per-dimension counts (sizes, channels, filters, units, kernel, stride,\n"
      "padding, dilation, groups, crop, batch) are at most {}.\n",
      kMaxYamlBytes >> 20, kMaxYamlNodes, kMaxAliasNodes, kMaxYamlDepth, kMaxLayers, kMaxDimension);
  out += "\nEnvironment variables (read by the programs, not part of the model file):\n\n"
         "- `OMP_NUM_THREADS`: threads of the CPU kernels, its first value (default: the cores this process may\n"
         "  run on, split between a host's ranks); one that is not a positive integer is an error.\n"
         "- `OPENBLAS_CORETYPE`: OpenBLAS's kernel family; when unset and OpenBLAS fell back to its generic\n"
         "  SSE3 kernels on a CPU it does not know, the programs restart once with `SkylakeX` or `Haswell`.\n"
         "- `CNN_AUTOTUNE_CACHE`: the autotune cache file, or `none` for no cache (`--autotune-cache` wins;\n"
         "  default `$XDG_CACHE_HOME/cnn-train/autotune.json`, else `~/.cache/cnn-train/autotune.json`).\n"
         "- `CNN_DATA_CACHE`: the decoded-data cache's directory, or `none` for no cache (default\n"
         "  `$XDG_CACHE_HOME/cnn-train/data`, else `~/.cache/cnn-train/data`): `fer2013-csv` and `idx` data\n"
         "  decoded once is read back while the source files' bytes are unchanged.\n"
         "- `CNN_POOL_BACKWARD`: `auto` (default), `tiled` or `gather`, the kernel of the max-pool backward on a\n"
         "  GPU, every precision (`auto`: the streaming kernel where windows do not overlap, else the tiled one;\n"
         "  `tiled` and `gather` force those, to time them); another value is an error.\n"
         "- `CNN_BATCHNORM_KERNELS`: `one` (default) or `two`: a training batchnorm on a GPU (bf16, fp16, fp32,\n"
         "  tf32) runs one kernel a direction where its tensor fits one co-resident grid, else two; `two` always\n"
         "  runs the two-kernel path (to time it); another value is an error.\n";
  return out;
}

}  // namespace cnn

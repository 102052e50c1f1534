// The model file's schema (every section's keys, declared once) and the reading of a validated
// tree into ModelSpec, with the rules that span keys (crop within the input, one weight per class).
// Trap: defaults come only from model_spec.h (each declaration takes a default-constructed spec's
// member); never type a default here.
#include "config/model_spec.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/checked.h"

namespace cnn {

namespace {

constexpr int64_t kMaxEpochs = 1000000;

using SchemaPtr = std::shared_ptr<Schema>;

Type in_0_1_open() { return Type::real(0.0, 1.0, false, true); }  // [0, 1)
Type dimension(int64_t lo = 1) { return Type::integer(lo, kMaxDimension); }
Type count(int64_t lo, int64_t hi = kMaxEpochs) { return Type::integer(lo, hi); }

SchemaPtr input_schema() {
  const InputSpec d;
  auto s = std::make_shared<Schema>("input");
  s->key("channels", dimension(), "image channels: 1 gray, 3 colour").defaults_to(d.channels);
  s->key("height", dimension(), "image height in pixels; images are resized to it").required();
  s->key("width", dimension(), "image width in pixels").required();
  return s;
}

SchemaPtr loss_schema() {
  const LossSpec d;
  auto s = std::make_shared<Schema>("loss");
  s->key("type", Type::choice({"softmax_cross_entropy"}), "the loss").defaults_to(d.type);
  s->key("label_smoothing", in_0_1_open(), "targets (1 - s) one-hot + s/K over the K classes (PyTorch's convention)")
      .defaults_to(d.label_smoothing);
  s->key("class_weights",
         Type::any_of({Type::choice({"none", "balanced"}),
                       Type::list(Type::real(0.0), 1, static_cast<size_t>(kMaxDimension), "class weight")})
             .expect("none, balanced or a list of class weights"),
         "per-class loss weights: `balanced` is N / (K count_k) from the training split; a list gives one per class")
      .defaults_to(d.class_weights);
  return s;
}

SchemaPtr augment_schema() {
  const AugmentSpec d;
  auto crop = std::make_shared<Schema>("random_crop");
  crop->key("size", dimension(0), "crop size, 0 = off; the network input becomes size x size").defaults_to(d.crop_size);
  crop->key("padding", dimension(0), "zero padding added on every side before cropping").defaults_to(d.crop_padding);
  auto s = std::make_shared<Schema>("augment");
  s->key("random_crop", Type::map(crop), "a random crop of each training image (evaluation takes the centre)");
  s->key("hflip", Type::boolean(), "random horizontal flip").defaults_to(d.hflip);
  s->key("rotate", Type::real(0.0, 180.0), "random rotation, uniform in [-rotate, +rotate] degrees").defaults_to(d.rotate);
  s->key("brightness", Type::real(0.0, 1.0), "random additive brightness, up to this fraction of full scale")
      .defaults_to(d.brightness);
  s->key("contrast", Type::real(0.0, 1.0), "random contrast scaling around the image mean, up to this fraction")
      .defaults_to(d.contrast);
  return s;
}

SchemaPtr data_schema() {
  const DataSpec d;
  auto norm = std::make_shared<Schema>("normalize");
  norm->key("mean", Type::list(Type::real(), 1, 4096, "value"), "per-channel mean, in 0..1 pixel units").required();
  norm->key("std", Type::list(Type::positive(), 1, 4096, "value"), "per-channel standard deviation").required();
  auto s = std::make_shared<Schema>("data");
  s->key("format", Type::choice({"fer2013-csv", "image-folder", "idx", "synthetic"}),
         "the data source (formats below)").defaults_to(d.format);
  s->key("path", Type::string(), "the file or folder of the data, relative to the working directory").defaults_to(d.path);
  s->key("normalize",
         Type::any_of({Type::choice({"auto"}), Type::map(norm)}).expect("'auto' or a map {mean: [...], std: [...]}"),
         "`auto`: mean and std of the training split; or `{mean: [...], std: [...]}`, one value per channel")
      .defaults_to("auto");
  s->key("augment", Type::map(augment_schema()), "training-time augmentation");
  s->key("val_split", in_0_1_open(), "fraction of train carved out as val when the source has no val split")
      .defaults_to(d.val_split);
  s->key("split_seed", Type::uinteger(), "seed of that carve (fixed: the same val in every run)").defaults_to(d.split_seed);
  s->key("on_bad_row", Type::choice({"error", "skip"}),
         "a malformed fer2013-csv row or unreadable image: `error` stops, `skip` counts and logs it")
      .defaults_to(d.on_bad_row);
  s->key("workers", Type::integer(0, 256), "background loader threads").defaults_to(d.workers);
  s->key("prefetch", Type::integer(1, 1024), "batches prepared ahead").defaults_to(d.prefetch);
  s->key("drop_last", Type::boolean(), "drop the last, short batch of each epoch").defaults_to(d.drop_last);
  s->key("synthetic_size", Type::integer(1, int64_t(1) << 24), "images per split for `format: synthetic`")
      .defaults_to(d.synthetic_size);
  s->key("color", Type::choice({"auto", "gray", "rgb"}), "how image-folder files are read; auto: gray for 1 channel, rgb for 3")
      .defaults_to(d.color);
  s->key("gpu_resident", Type::choice({"auto", "on", "off"}),
         "keep the training images on the GPU and augment there (auto: when they fit)")
      .defaults_to(d.gpu_resident);
  s->set_note(
      "Data formats: `fer2013-csv` is a CSV with header `emotion,pixels,Usage` (2304 space-separated 0-255 "
      "values per 48x48 image; Usage `Training`, `PublicTest`, `PrivateTest` are train, val, test); "
      "`image-folder` is `path/{train,val,test}/<class>/<image>` with class names from the folder names "
      "(they must equal `classes` when it is given), any image OpenCV reads, resized to the input; files "
      "whose extension is not an image's are skipped and counted; `idx` is a folder with "
      "`train-images-idx3-ubyte`, `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte`, "
      "`t10k-labels-idx1-ubyte` (each may be `.gz`); `synthetic` makes random images of the input size. A "
      "source without a val split gets one carved by `val_split`; test never chooses anything.");
  return s;
}

SchemaPtr optimizer_schema() {
  const OptimizerSpec d;
  auto s = std::make_shared<Schema>("optimizer");
  s->key("type", Type::choice({"sgd", "adam", "adamw", "rmsprop"}), "the optimizer").defaults_to(d.type);
  s->key("lr", Type::positive(), "base learning rate (before warmup, schedule and lr_scaling)").defaults_to(d.lr);
  s->key("weight_decay", Type::real(0.0), "L2 penalty (sgd, adam, rmsprop) or decoupled decay (adamw)")
      .defaults_to(d.weight_decay);
  s->discriminate_by("type");
  const Key momentum = Key("momentum", in_0_1_open(), "momentum factor").defaults_to(d.momentum);
  const Key eps = Key("eps", Type::positive(), "added to the denominator").defaults_to(d.eps);
  const Key beta1 = Key("beta1", in_0_1_open(), "decay of the gradient average").defaults_to(d.beta1);
  const Key beta2 = Key("beta2", in_0_1_open(), "decay of the squared-gradient average").defaults_to(d.beta2);
  s->variant("sgd", {momentum, Key("nesterov", Type::boolean(), "Nesterov momentum (needs momentum > 0)").defaults_to(d.nesterov)});
  s->variant("adam", {beta1, beta2, eps});
  s->variant("adamw", {beta1, beta2, eps});
  s->variant("rmsprop",
             {Key("alpha", in_0_1_open(), "smoothing of the squared-gradient average").defaults_to(d.alpha), momentum, eps});
  return s;
}

SchemaPtr schedule_schema() {
  const ScheduleSpec d;
  auto s = std::make_shared<Schema>("schedule");
  s->key("type", Type::choice({"constant", "step", "multistep", "exponential", "cosine", "plateau"}),
         "learning-rate schedule, per epoch").defaults_to(d.type);
  s->key("warmup_epochs", Type::real(0.0, double(kMaxEpochs)), "linear warmup length in epochs (fractions allowed)")
      .defaults_to(d.warmup_epochs);
  s->key("warmup_start_factor", Type::real(0.0, 1.0), "warmup starts at this fraction of lr")
      .defaults_to(d.warmup_start_factor);
  s->discriminate_by("type");
  const Key gamma =
      Key("gamma", Type::real(0.0, 1.0, true, false), "decay factor (step: every step_size epochs; multistep: at "
                                                      "each milestone; exponential: every epoch)")
          .defaults_to(d.gamma);
  s->variant("constant", {});
  s->variant("step", {Key("step_size", count(1), "epochs between decays").defaults_to(d.step_size), gamma});
  s->variant("multistep",
             {Key("milestones", Type::list(count(1), 1, 1000, "epoch").expect("a list of epochs"),
                  "increasing epochs at which lr is multiplied by gamma")
                  .required(),
              gamma});
  s->variant("exponential", {gamma});
  s->variant("cosine", {Key("min_lr", Type::real(0.0), "floor of the cosine decay").defaults_to(d.min_lr)});
  s->variant("plateau",
             {Key("monitor", Type::choice({"val_loss", "val_acc"}), "the val metric watched").defaults_to(d.monitor),
              Key("factor", Type::real(0.0, 1.0, true, true), "lr is multiplied by this on a plateau").defaults_to(d.factor),
              Key("patience", count(0), "epochs without improvement before decaying").defaults_to(d.patience),
              Key("threshold", Type::real(0.0), "smallest change that counts as an improvement").defaults_to(d.threshold)});
  return s;
}

SchemaPtr autotune_schema() {
  const AutotuneSpec a;
  auto at = std::make_shared<Schema>("autotune");
  at->key("cache", Type::string(),
          "decisions file, or none; empty: $CNN_AUTOTUNE_CACHE, else ~/.cache/cnn-train/autotune.json (--autotune-cache)")
      .defaults_to(a.cache);
  at->key("workspace_mb", Type::integer(0, int64_t(1) << 20), "most scratch MiB one conv algorithm may take (--workspace-mb)")
      .defaults_to(a.workspace_mb);
  at->key("tolerance", Type::real(0.0),
          "largest relative L2 error from the FP32 reference a candidate may have; 0: each op's own (--autotune-tolerance)")
      .defaults_to(a.tolerance);
  return at;
}

SchemaPtr loss_scale_schema() {
  const LossScaleSpec d;
  auto s = std::make_shared<Schema>("loss_scale");
  s->key("init", Type::real(1.0, 16777216.0), "the first scale, a power of two from 1 to 2^24").defaults_to(d.init);
  s->key("growth_interval", Type::integer(1, int64_t(1) << 31),
         "clean steps in a row after which the scale doubles (an overflow halves it and skips the step)")
      .defaults_to(d.growth_interval);
  return s;
}

SchemaPtr train_schema() {
  const TrainSpec d;
  auto ckpt = std::make_shared<Schema>("checkpoint");
  ckpt->key("every_epochs", count(0), "write checkpoints/epoch-NNNN.safetensors every N epochs (0: never)")
      .defaults_to(d.checkpoint.every_epochs);
  ckpt->key("keep_last", count(0), "keep the last K epoch-NNNN files (0: keep all)").defaults_to(d.checkpoint.keep_last);
  ckpt->key("best_metric", Type::choice({"val_acc", "val_loss", "val_macro_f1"}),
            "the val metric that chooses checkpoints/best.safetensors")
      .defaults_to(d.checkpoint.best_metric);
  auto stop = std::make_shared<Schema>("early_stopping");
  stop->key("metric", Type::choice({"val_loss", "val_acc", "val_macro_f1"}), "the val metric watched")
      .defaults_to(d.early_stopping.metric);
  stop->key("patience", count(0), "stop after this many epochs without improvement (0: off)")
      .defaults_to(d.early_stopping.patience);
  stop->key("min_delta", Type::real(0.0), "smallest change that counts as an improvement")
      .defaults_to(d.early_stopping.min_delta);

  auto s = std::make_shared<Schema>("train");
  s->key("epochs", count(1), "passes over the training split").defaults_to(d.epochs);
  s->key("batch_size", dimension(), "images per step on each rank").defaults_to(d.batch_size);
  s->key("seed", Type::uinteger(), "seed of initialisation, shuffling, augmentation and dropout").defaults_to(d.seed);
  s->key("deterministic", Type::boolean(), "the same numbers on every run (deterministic algorithms only)")
      .defaults_to(d.deterministic);
  s->key("fuse_activations", Type::boolean(), "batchnorm, dense and FP32 conv2d apply a following activation in their own kernels")
      .defaults_to(d.fuse_activations);
  s->key("fold_conv_bias", Type::boolean(),
         "tf32/bf16/fp16: a conv2d whose only consumer is a batchnorm runs without its bias, which the batchnorm "
         "takes as a mean offset (same outputs and checkpoints; the folded bias's gradient is exactly zero, so it moves by "
         "weight decay alone; fp32 is never folded)")
      .defaults_to(d.fold_conv_bias);
  s->key("max_steps", Type::integer(0, int64_t(1) << 53), "stop after this many optimizer steps (0: no limit)")
      .defaults_to(d.max_steps);
  s->key("cuda_graph", Type::boolean(), "capture the GPU training step in a CUDA graph").defaults_to(d.cuda_graph);
  s->key("prepack_weights", Type::boolean(),
         "bf16/fp16 on a GPU: pack every layer's 16-bit weight copy once a training step, in one launch (false: "
         "each convolution and dense call packs its own, the same bits)")
      .defaults_to(d.prepack_weights);
  s->key("backend", Type::choice({"auto", "cuda", "cudnn"}), "on a GPU, layers left auto use this backend where they can")
      .defaults_to(d.backend);
  s->key("precision", Type::choice({"fp32", "tf32", "bf16", "fp16"}),
         "fp32: FP32 everywhere; tf32: FP32 storage, TF32 tensor cores in cuDNN convolutions and cuBLAS dense; "
         "bf16: activations and their gradients stored in BF16 (channels-last), FP32 master weights, "
         "gradients, sums and optimizer; fp16: the same in FP16, with a dynamic loss scale (train.loss_scale) "
         "(README \"Precision\")")
      .defaults_to(d.precision);
  s->key("tf32_layout", Type::choice({"auto", "nchw", "nhwc"}),
         "tf32 only: how FP32 activations are stored; nhwc: channels-last (f32cl), which cuDNN's TF32 convolutions "
         "read without transposing; auto: nhwc on a GPU where every tf32 layer has a channels-last implementation, "
         "else nchw (README \"Precision\")")
      .defaults_to(d.tf32_layout);
  s->key("loss_scale", Type::map(loss_scale_schema()),
         "fp16 only: the dynamic loss scale (README \"Precision\"); ignored in other precisions");
  s->key("autotune", Type::map(autotune_schema()), "how the autotuner measures");
  s->key("clip_grad_norm", Type::real(0.0), "clip the global gradient L2 norm to this (0: off)").defaults_to(d.clip_grad_norm);
  s->key("lr_scaling", Type::choice({"none", "linear", "sqrt"}), "data-parallel: lr times 1, ranks or sqrt(ranks)")
      .defaults_to(d.lr_scaling);
  s->key("log_every", Type::integer(1, int64_t(1) << 40), "steps between progress lines when not on a terminal")
      .defaults_to(d.log_every);
  s->key("optimizer", Type::map(optimizer_schema()), "the optimizer");
  s->key("schedule", Type::map(schedule_schema()), "the learning-rate schedule");
  s->key("checkpoint", Type::map(ckpt), "checkpoint policy");
  s->key("early_stopping", Type::map(stop), "stop when a val metric stops improving");
  return s;
}

SchemaPtr eval_schema() {
  const EvalSpec d;
  auto s = std::make_shared<Schema>("eval");
  s->key("ten_crop", Type::boolean(), "average the predictions of 10 crops of the random_crop size (corners, centre, mirrored)")
      .defaults_to(d.ten_crop);
  s->key("batch_size", dimension(), "images per evaluation batch").defaults_to(d.batch_size);
  s->key("test_every_epoch", Type::boolean(), "also evaluate the test split after every epoch (logged only)")
      .defaults_to(d.test_every_epoch);
  return s;
}

SchemaPtr dist_schema() {
  const DistSpec d;
  auto s = std::make_shared<Schema>("dist");
  s->key("bucket_mb", Type::real(0.0, 65536.0, true), "gradients are all-reduced in buckets of this many MB")
      .defaults_to(d.bucket_mb);
  s->key("timeout_s", Type::real(0.0, 1e7, true), "a rank silent this many seconds stops the job").defaults_to(d.timeout_s);
  s->key("compress", Type::choice({"none", "bf16"}), "gradients sent as bf16 (half the bytes)").defaults_to(d.compress);
  s->key("sync_batchnorm", Type::boolean(), "batchnorm statistics over the global batch (PyTorch's SyncBatchNorm)")
      .defaults_to(d.sync_batchnorm);
  return s;
}

// Every layer's own map: the keys all layers share, then the keys of its `type`.
SchemaPtr layer_schema(const LayerSchemas& layers) {
  const LayerSpec d;
  auto s = std::make_shared<Schema>("layer");
  s->key("name", Type::name().expect("a layer name of letters, digits, '_' and '-'"),
         "unique; names the layer's tensors (conv1.weight) and --set paths (layers.conv1.filters)")
      .required();
  s->key("type", Type::string(true).expect("a layer type"), "the layer type (below)").required();
  s->key("inputs",
         Type::any_of({Type::name(), Type::list(Type::name(), 1, 64, "input layer name")})
             .expect("a layer name or a list of layer names"),
         "input layers by name (`input`: the model input); default: the layer before")
      .shown_default("the layer before");
  s->key("backend", Type::choice({"auto", "cpu", "cuda", "cudnn"}),
         "where the layer runs; auto: the run's device, the faster GPU backend measured")
      .defaults_to(d.backend);
  s->key("algo", Type::choice({"auto"}), "convolution algorithm (conv2d only)").defaults_to("auto");
  s->key("precision", Type::choice({"auto", "fp32", "tf32", "bf16", "fp16"}),
         "this layer's precision; auto: train.precision (fp32 keeps a layer in FP32 in a bf16 or fp16 run, with casts "
         "planned)")
      .defaults_to("auto");
  s->discriminate_by("type");
  for (const auto& [type, own] : layers) s->variant(type, own.keys(), own.summary());
  return s;
}

// Top-level order is the order of the reference and of "the top level takes ..." messages.
SchemaPtr top_schema(const LayerSchemas& layers) {
  auto s = std::make_shared<Schema>("model");
  s->key("name", Type::string(true).expect("a model name"), "names the run directory (runs/<name>-<time>) and reports")
      .required();
  s->key("input", Type::map(input_schema()).expect("a map {channels, height, width}"), "the network input").required();
  s->key("classes", Type::list(Type::string(true).expect("a class name"), 0, kMaxDimension, "class name"),
         "class names in label order; empty: the image folders' names, else class0..classK-1")
      .defaults_to(std::vector<std::string>{});
  s->key("layers",
         Type::list(Type::map(layer_schema(layers)).expect("a layer map {name: ..., type: ...}"), 1,
                    static_cast<size_t>(kMaxLayers), "layer")
             .expect("a list of layers"),
         "the network, in order unless a layer names its inputs")
      .required();
  s->key("loss", Type::map(loss_schema()), "the loss");
  s->key("data", Type::map(data_schema()), "the data");
  s->key("train", Type::map(train_schema()), "training");
  s->key("eval", Type::map(eval_schema()), "evaluation");
  s->key("dist", Type::map(dist_schema()), "data-parallel training");
  return s;
}

// ---- reading the validated tree

void read_input(const Value& s, InputSpec& in) {
  in.channels = s["channels"].integer();
  in.height = s["height"].integer();
  in.width = s["width"].integer();
  in.config = s;
}

void read_classes(const Value& list, std::vector<std::string>& classes) {
  classes = list.strings();
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < classes.size(); ++i) {
    auto [first, fresh] = seen.emplace(classes[i], i);
    if (!fresh) list[i].fail(fmt::format("duplicate class name '{}' (also classes[{}])", classes[i], first->second));
  }
}

void read_layers(const Value& list, std::vector<LayerSpec>& layers) {
  std::map<std::string, const Value*> names;
  for (size_t i = 0; i < list.size(); ++i) {
    const Value& ln = list[i];
    LayerSpec l;
    l.index = static_cast<int>(i);
    l.where = ln.where();
    l.name = ln["name"].string();
    auto [first, fresh] = names.emplace(l.name, &ln);
    if (!fresh)
      ln["name"].fail(fmt::format("duplicate layer name '{}': {} at line {} has it already", l.name, first->second->path(),
                                  first->second->where().line));
    l.type = ln["type"].string();
    if (const Value* in = ln.find("inputs")) l.inputs = in->is_list() ? in->strings() : std::vector<std::string>{in->string()};
    l.backend = ln["backend"].string();
    l.own_precision = ln["precision"].string();
    l.attrs = ln;
    layers.push_back(std::move(l));
  }
}

void read_loss(const Value& s, LossSpec& loss, size_t n_classes) {
  loss.type = s["type"].string();
  loss.label_smoothing = s["label_smoothing"].real();
  const Value& w = s["class_weights"];
  if (w.is_list()) {
    loss.class_weights = "list";
    loss.class_weight_values = w.reals();
    if (n_classes > 0 && loss.class_weight_values.size() != n_classes)
      w.fail(fmt::format("expected one weight per class ({} classes), found {} weights", n_classes,
                         loss.class_weight_values.size()));
  } else {
    loss.class_weights = w.string();
  }
  loss.config = s;
}

void read_data(const Value& s, DataSpec& d, const InputSpec& input) {
  d.format = s["format"].string();
  d.path = s["path"].string();
  const Value& norm = s["normalize"];
  d.normalize.automatic = !norm.is_map();
  if (norm.is_map()) {
    d.normalize.mean = norm["mean"].reals();
    d.normalize.std = norm["std"].reals();
    for (const char* key : {"mean", "std"})
      if (static_cast<int64_t>(norm[key].size()) != input.channels)
        norm[key].fail(fmt::format("expected {} values (one per input channel), found {}", input.channels, norm[key].size()));
  }
  const Value& aug = s["augment"];
  const Value& crop = aug["random_crop"];
  AugmentSpec& a = d.augment;
  a.crop_size = crop["size"].integer();
  a.crop_padding = crop["padding"].integer();
  // The padded image is one tensor: within the per-tensor cap (core/checked.h), so its sizes fit.
  const Checked padded_h = Checked(a.crop_padding) * 2 + input.height;
  const Checked padded_w = Checked(a.crop_padding) * 2 + input.width;
  if (a.crop_padding != 0 && !within_tensor_cap(padded_h * padded_w * input.channels))
    crop["padding"].fail_expected(fmt::format(
        "a padding that keeps the padded image within the per-tensor cap of {} elements", kMaxTensorElements));
  const int64_t largest = std::min(input.height, input.width) + 2 * a.crop_padding;
  if (a.crop_size > largest)
    crop["size"].fail_expected(fmt::format("a crop size <= {} (the input plus twice the padding)", largest));
  a.hflip = aug["hflip"].boolean();
  a.rotate = aug["rotate"].real();
  a.brightness = aug["brightness"].real();
  a.contrast = aug["contrast"].real();
  d.val_split = s["val_split"].real();
  d.split_seed = s["split_seed"].uinteger();
  d.on_bad_row = s["on_bad_row"].string();
  d.workers = s["workers"].integer();
  d.prefetch = s["prefetch"].integer();
  d.drop_last = s["drop_last"].boolean();
  d.synthetic_size = s["synthetic_size"].integer();
  d.color = s["color"].string();
  if (d.color == "rgb" && input.channels != 3)
    s["color"].fail(fmt::format("rgb needs input.channels 3, the model has {}", input.channels));
  d.gpu_resident = s["gpu_resident"].string();
  d.config = s;
}

void read_optimizer(const Value& s, OptimizerSpec& o) {
  o.type = s["type"].string();
  o.lr = s["lr"].real();
  o.weight_decay = s["weight_decay"].real();
  if (s.has("momentum")) o.momentum = s["momentum"].real();
  if (s.has("nesterov")) o.nesterov = s["nesterov"].boolean();
  if (o.nesterov && o.momentum <= 0) s["nesterov"].fail_expected("false (Nesterov needs momentum > 0)");
  if (s.has("alpha")) o.alpha = s["alpha"].real();
  if (s.has("beta1")) o.beta1 = s["beta1"].real();
  if (s.has("beta2")) o.beta2 = s["beta2"].real();
  if (s.has("eps")) o.eps = s["eps"].real();
}

void read_schedule(const Value& s, ScheduleSpec& sc) {
  sc.type = s["type"].string();
  sc.warmup_epochs = s["warmup_epochs"].real();
  sc.warmup_start_factor = s["warmup_start_factor"].real();
  if (s.has("step_size")) sc.step_size = s["step_size"].integer();
  if (s.has("gamma")) sc.gamma = s["gamma"].real();
  if (s.has("milestones")) {
    const Value& list = s["milestones"];
    sc.milestones = list.integers();
    for (size_t i = 1; i < sc.milestones.size(); ++i)
      if (sc.milestones[i] <= sc.milestones[i - 1])
        list[i].fail_expected(fmt::format("an increasing epoch >= {}", sc.milestones[i - 1] + 1));
  }
  if (s.has("min_lr")) sc.min_lr = s["min_lr"].real();
  if (s.has("monitor")) sc.monitor = s["monitor"].string();
  if (s.has("factor")) sc.factor = s["factor"].real();
  if (s.has("patience")) sc.patience = s["patience"].integer();
  if (s.has("threshold")) sc.threshold = s["threshold"].real();
}

AutotuneSpec read_autotune(const Value& s) {
  AutotuneSpec a;
  a.cache = s["cache"].string();
  a.workspace_mb = s["workspace_mb"].integer();
  a.tolerance = s["tolerance"].real();
  return a;
}

void read_train(const Value& s, TrainSpec& t) {
  t.epochs = s["epochs"].integer();
  t.batch_size = s["batch_size"].integer();
  t.seed = s["seed"].uinteger();
  t.deterministic = s["deterministic"].boolean();
  t.fuse_activations = s["fuse_activations"].boolean();
  t.fold_conv_bias = s["fold_conv_bias"].boolean();
  t.max_steps = s["max_steps"].integer();
  t.cuda_graph = s["cuda_graph"].boolean();
  t.prepack_weights = s["prepack_weights"].boolean();
  t.backend = s["backend"].string();
  t.precision = s["precision"].string();
  t.tf32_layout = s["tf32_layout"].string();
  const Value& ls = s["loss_scale"];
  t.loss_scale.init = ls["init"].real();
  // A power of two keeps scaling and unscaling exact (only the exponent moves).
  if (int e = 0; std::frexp(t.loss_scale.init, &e) != 0.5) ls["init"].fail_expected("a power of two from 1 to 2^24");
  t.loss_scale.growth_interval = ls["growth_interval"].integer();
  t.autotune = read_autotune(s["autotune"]);
  t.clip_grad_norm = s["clip_grad_norm"].real();
  t.lr_scaling = s["lr_scaling"].string();
  t.log_every = s["log_every"].integer();
  read_optimizer(s["optimizer"], t.optimizer);
  read_schedule(s["schedule"], t.schedule);
  const Value& c = s["checkpoint"];
  t.checkpoint.every_epochs = c["every_epochs"].integer();
  t.checkpoint.keep_last = c["keep_last"].integer();
  t.checkpoint.best_metric = c["best_metric"].string();
  const Value& e = s["early_stopping"];
  t.early_stopping.metric = e["metric"].string();
  t.early_stopping.patience = e["patience"].integer();
  t.early_stopping.min_delta = e["min_delta"].real();
  t.config = s;
}

void read_eval(const Value& s, EvalSpec& e) {
  e.ten_crop = s["ten_crop"].boolean();
  e.batch_size = s["batch_size"].integer();
  e.test_every_epoch = s["test_every_epoch"].boolean();
  e.config = s;
}

void read_dist(const Value& s, DistSpec& d) {
  d.bucket_mb = s["bucket_mb"].real();
  d.timeout_s = s["timeout_s"].real();
  d.compress = s["compress"].string();
  d.sync_batchnorm = s["sync_batchnorm"].boolean();
  d.config = s;
}

}  // namespace

std::shared_ptr<const Schema> model_schema(const LayerSchemas& layers) { return top_schema(layers); }

ModelSpec parse_model_spec(const Value& root, const std::string& file, const LayerSchemas& layers) {
  const Value doc =
      check(root, Type::map(top_schema(layers)).expect("a model description (a map with name, input, layers, ...)"));
  ModelSpec spec;
  spec.file = file;
  spec.name = doc["name"].string();
  // The name becomes a directory name (runs/<name>-<time>).
  if (spec.name.find_first_of("/\\") != std::string::npos || spec.name[0] == '.')
    doc["name"].fail_expected("a model name without '/' or '\\' that does not start with '.'");
  read_input(doc["input"], spec.input);
  read_classes(doc["classes"], spec.classes);
  read_layers(doc["layers"], spec.layers);
  read_loss(doc["loss"], spec.loss, spec.classes.size());
  read_data(doc["data"], spec.data, spec.input);
  read_train(doc["train"], spec.train);
  for (LayerSpec& l : spec.layers) {
    l.preferred_backend = spec.train.backend;
    l.precision = l.own_precision == "auto" ? spec.train.precision : l.own_precision;
  }
  read_eval(doc["eval"], spec.eval);
  read_dist(doc["dist"], spec.dist);
  spec.config = doc;
  return spec;
}

ModelSpec parse_model_text(const std::string& yaml, const std::string& file, const std::vector<std::string>& overrides,
                           const LayerSchemas& layers) {
  Value root = parse_yaml(yaml, file);
  for (const auto& o : overrides) apply_override(root, o);
  return parse_model_spec(root, file, layers);
}

ModelSpec load_model_spec(const std::string& path, const std::vector<std::string>& overrides,
                          const LayerSchemas& layers) {
  Value root = load_yaml_file(path);
  for (const auto& o : overrides) apply_override(root, o);
  return parse_model_spec(root, path, layers);
}

AutotuneSpec parse_autotune_overrides(const std::vector<std::string>& overrides) {
  Value root = Value::map(Location{"<--set>", 0, 0});
  for (const auto& o : overrides) apply_override(root, o);
  auto train = std::make_shared<Schema>("train");
  train->key("autotune", Type::map(autotune_schema()), "how the autotuner measures");
  auto top = std::make_shared<Schema>();
  top->key("train", Type::map(train), "the training");
  return read_autotune(check(root, Type::map(top))["train"]["autotune"]);
}

void set_classes(ModelSpec& spec, const std::vector<std::string>& names) {
  spec.classes = names;
  Value list = Value::list(spec.config["classes"].where());
  for (const auto& n : names) list.push_back(Value::scalar(Value::Kind::string, n, list.where(), true));
  spec.config.set("classes", std::move(list));
}

}  // namespace cnn

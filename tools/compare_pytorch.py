#!/usr/bin/env python3
"""Cross-checks cnn-train against PyTorch on one model file, then times both on the same GPU.

The model of a cnn-train YAML file is rebuilt as a torch.nn.Module that runs the layers in our
order (sequential unless `inputs:` names others; Kahn's order, file order among ready layers) and
names its tensors like our checkpoints: state_dict keys are "conv1.weight", "bn1.running_mean", ...
 1. check (skip with --no-check): `cnn-bench model --dump` writes our first training step with every
    dropout p set to 0; its initial weights go into the torch model, and the logits, the loss and
    every gradient are compared in FP32 with TF32 off. A relative L2 error above 1e-3 -> exit 1,
    unless the same step in float64 shows ours at most 2x as far from it as PyTorch's FP32 result
    (rounding near a ReLU/max-pool threshold flips masks in either FP32 result).
 2. timing: per --batch, whole PyTorch training steps (forward, loss, backward, the model's
    optimizer) on synthetic data in eager mode, under torch.compile(model) and captured as one CUDA
    graph, next to `cnn-bench model --json`; one table, and everything in --json.
    --precision fp32|tf32|bf16 (default fp32) is the precision of both sides' timings: ours runs
    `cnn-bench model --precision P`, PyTorch sets torch.backends.cudnn.allow_tf32 and
    torch.backends.cuda.matmul.allow_tf32 to P == tf32 (--tf32 on|off overrides PyTorch's side
    alone); for bf16 PyTorch runs as its users train in mixed precision: the forward and the loss
    under torch.autocast("cuda", dtype=torch.bfloat16), model and input in channels_last, FP32
    weights and optimizer (the whole-step graph captures autocast with its weight cache off).
    The check always compares FP32 with TF32 off on both sides.
Needs torch, safetensors and pyyaml, and a CUDA build of cnn-bench (Debian: /usr/bin/python3 with
python3-torch, python3-yaml and python3-safetensors, or pip's). Example:
    python3 tools/compare_pytorch.py models/fashion_cnn.yaml --batch 64 --batch 256 --json cmp.json
    python3 tools/compare_pytorch.py models/vgg_fer.yaml --batch 64 --batch 640 --precision tf32
    python3 tools/compare_pytorch.py models/fer_cnn.yaml --batch 64 --backend cudnn --modes eager
Trap: our step reads the loss back every step (one host sync); the PyTorch steps never sync, as
PyTorch users write them. Both update with lr * 1e-3 (cnn-bench's choice: the weights stay sane).
"""
import argparse
import heapq
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # --help and the pure-Python model planning work without torch
    torch = nn = F = None
try:  # torch.compile's backend (torch >= 2); Debian 12's torch 1.13 has none (compare_pytorch_cpu.py uses it)
    import torch._dynamo
except ImportError:
    pass

TOLERANCE = 1e-3
MODES = ("eager", "compile", "graph")


class ModelError(Exception):
    """The model file cannot be mirrored (cnn-bench rejects such a file as well)."""


def get(node, path, default=None):
    """node["a"]["b"] for path "a.b"; default where a key is absent or null."""
    for key in path.split("."):
        if not isinstance(node, dict) or node.get(key) is None:
            return default
        node = node[key]
    return node


def num(v, what):
    if not isinstance(v, bool):
        try:  # PyYAML reads "1e-05" as a string (YAML 1.1); our reader takes it as a number
            return float(v)
        except (TypeError, ValueError):
            pass
    raise ModelError(f"{what}: expected a number, found {v!r}")


def pair(v, what):
    """An int or [h, w] -> (h, w)."""
    v = v if isinstance(v, list) else [v, v]
    if len(v) != 2 or any(num(x, what) != int(num(x, what)) for x in v):
        raise ModelError(f"{what}: expected an int or [h, w], found {v!r}")
    return int(num(v[0], what)), int(num(v[1], what))


def apply_set(cfg, assignment):
    """--set KEY=VALUE as lib/config/override.cpp does: dotted path; list items by [N], .N or name."""
    key, eq, text = assignment.partition("=")
    steps = []
    for seg in key.strip().split("."):
        head, *idx = seg.split("[")
        steps += [(head, False)] + [(i.rstrip("]"), True) for i in idx]
    if not eq or not key.strip() or any(not s for s, _ in steps):
        raise ModelError(f"malformed --set '{assignment}': expected KEY=VALUE, e.g. train.optimizer.lr=0.05")
    cur, value = cfg, yaml.safe_load(text)
    for n, (step, bracket) in enumerate(steps):
        if isinstance(cur, list):
            named = [i for i, item in enumerate(cur) if isinstance(item, dict) and str(item.get("name")) == step]
            k = int(step) if step.isdigit() else (named[0] if named and not bracket else len(cur))
            if k >= len(cur):
                raise ModelError(f"--set {assignment}: no list item '{step}'")
        elif isinstance(cur, dict) and not bracket:
            k = step
            if n + 1 < len(steps) and cur.get(k) is None:
                cur[k] = {}
        else:
            raise ModelError(f"--set {assignment}: cannot set '{step}' inside {cur!r}")
        if n + 1 == len(steps):
            cur[k] = value
        cur = cur[k]


def input_shape(cfg):
    """(C, H, W) of the network input; data.augment.random_crop.size replaces H and W."""
    c = int(num(get(cfg, "input.channels", 1), "input.channels"))
    h, w = (int(num(get(cfg, f"input.{k}"), f"input.{k}")) for k in ("height", "width"))
    crop = int(num(get(cfg, "data.augment.random_crop.size", 0), "data.augment.random_crop.size"))
    return (c, crop, crop) if crop > 0 else (c, h, w)


def resolve_layer(layer, ins):
    """The layer's attributes with our defaults, and its output shape per image ("out").
    Only what PyTorch needs: cnn-bench itself rejects a model whose shapes don't fit."""
    t, what, x = layer.get("type"), f"layer '{layer['name']}'", ins[0]
    a = {"in": x, "out": x}
    opt = lambda key, default: get(layer, key, default)  # noqa: E731
    if t == "conv2d":
        k, s, d = pair(layer.get("kernel"), what), pair(opt("stride", 1), what), pair(opt("dilation", 1), what)
        if opt("padding", 0) == "same":  # dilation*(k-1)/2 per side (odd effective kernels only)
            p = tuple(d[i] * (k[i] - 1) // 2 for i in (0, 1))
        else:
            p = pair(opt("padding", 0), what)
        f = int(num(layer.get("filters"), what))
        out = [(x[1 + i] + 2 * p[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in (0, 1)]
        a.update(filters=f, kernel=k, stride=s, padding=p, dilation=d, groups=int(num(opt("groups", 1), what)),
                 bias=bool(opt("bias", True)), out=(f, *out))
    elif t == "dense":
        units = int(num(layer.get("units"), what))
        a.update(units=units, in_features=math.prod(x), bias=bool(opt("bias", True)), out=(units,))
    elif t in ("maxpool", "avgpool"):
        k = pair(layer.get("kernel"), what)
        s, p = pair(opt("stride", list(k)), what), pair(opt("padding", 0), what)
        out = [(x[1 + i] + 2 * p[i] - k[i]) // s[i] + 1 for i in (0, 1)]  # floor: ceil_mode=False
        a.update(kernel=k, stride=s, padding=p, out=(x[0], *out))
    elif t in ("global_avgpool", "flatten"):
        a["out"] = (x[0],) if t == "global_avgpool" else (math.prod(x),)
    elif t in ("leaky_relu", "elu"):
        a["alpha"] = num(opt("alpha", 0.01 if t == "leaky_relu" else 1.0), what)
    elif t == "batchnorm":
        a.update(momentum=num(opt("momentum", 0.1), what), eps=num(opt("eps", 1e-5), what))
    elif t == "dropout":
        a["p"] = num(opt("p", 0.5), what)
    elif t == "concat":
        a["out"] = (sum(s[0] for s in ins), *x[1:])
    elif t not in ("relu", "sigmoid", "tanh", "add"):
        raise ModelError(f"{what}: unknown layer type '{t}'")
    return a


def plan_graph(cfg):
    """Layers in execution order, [(name, type, input names, attrs)], ordered as lib/graph/graph.cpp does."""
    layers = cfg.get("layers") or []
    if not layers:
        raise ModelError("the model has no layers")
    names = [str(layer.get("name")) for layer in layers]
    index = {n: i for i, n in enumerate(names)}
    inputs = []
    for i, layer in enumerate(layers):
        layer["name"] = names[i]
        if "." in names[i] or names[i] == "input":
            raise ModelError(f"layer name '{names[i]}' is reserved or contains '.'")
        given = [str(n) for n in layer.get("inputs") or []] or ["input" if i == 0 else names[i - 1]]
        if any(n != "input" and (n not in index or n == names[i]) for n in given):
            raise ModelError(f"layer '{names[i]}': an input of {given} does not exist")
        inputs.append(given)
    indeg = [sum(n != "input" for n in given) for given in inputs]
    consumers = [[] for _ in layers]
    for i, given in enumerate(inputs):
        for n in given:
            if n != "input":
                consumers[index[n]].append(i)
    ready, order = [i for i, d in enumerate(indeg) if d == 0], []
    heapq.heapify(ready)  # among ready layers the earliest in the file goes first
    while ready:
        order.append(heapq.heappop(ready))
        for c in consumers[order[-1]]:
            indeg[c] -= 1
            if indeg[c] == 0:
                heapq.heappush(ready, c)
    if len(order) != len(layers):
        raise ModelError("the layers form a cycle: " + ", ".join(n for n, d in zip(names, indeg) if d))
    shapes, plan = {"input": input_shape(cfg)}, []
    for i in order:
        attrs = resolve_layer(layers[i], [shapes[n] for n in inputs[i]])
        shapes[names[i]] = attrs["out"]
        plan.append((names[i], layers[i]["type"], tuple(inputs[i]), attrs))
    return plan


def bias_before_batchnorm(plan):
    """Biases of layers that feed only batchnorms: their gradient is zero up to rounding noise."""
    fed = {}
    for _, t, ins, _ in plan:
        for n in ins:
            fed.setdefault(n, set()).add(t)
    return {f"{n}.bias" for n, t, _, a in plan if a.get("bias") and fed.get(n) == {"batchnorm"}}


def optimizer_spec(cfg, lr_scale=1.0):
    """(torch.optim class name, keyword arguments) of train.optimizer, with cnn-train's defaults."""
    o = get(cfg, "train.optimizer", {})
    t = o.get("type", "sgd")
    val = lambda key, default: num(get(o, key, default), f"train.optimizer.{key}")  # noqa: E731
    lr, wd, momentum, eps = val("lr", 0.01) * lr_scale, val("weight_decay", 0.0), val("momentum", 0.9), val("eps", 1e-8)
    if t == "sgd":
        return "SGD", dict(lr=lr, momentum=momentum, nesterov=bool(get(o, "nesterov", False)), weight_decay=wd)
    if t in ("adam", "adamw"):
        betas = (val("beta1", 0.9), val("beta2", 0.999))
        return ("Adam" if t == "adam" else "AdamW"), dict(lr=lr, betas=betas, eps=eps, weight_decay=wd)
    if t == "rmsprop":
        return "RMSprop", dict(lr=lr, alpha=val("alpha", 0.99), eps=eps, weight_decay=wd, momentum=momentum)
    raise ModelError(f"train.optimizer.type: unknown optimizer '{t}'")


def build_model(plan):
    """The plan as a torch.nn.ModuleDict keyed by layer name, so state_dict keys are ours."""

    class YamlNet(nn.ModuleDict):
        def forward(self, x):
            vals = {"input": x}
            for name, t, ins, a in plan:
                xs = [vals[n] for n in ins]
                x = xs[0]
                if t in ("conv2d", "batchnorm", "dropout"):
                    x = self[name](x)
                elif t in ("dense", "flatten"):
                    x = self[name](x.flatten(1)) if t == "dense" else x.flatten(1)
                elif t == "maxpool":
                    x = F.max_pool2d(x, a["kernel"], a["stride"], a["padding"])
                elif t == "avgpool":
                    x = F.avg_pool2d(x, a["kernel"], a["stride"], a["padding"], count_include_pad=False)
                elif t == "global_avgpool":
                    x = x.mean(dim=(2, 3))
                elif t == "add":
                    for other in xs[1:]:
                        x = x + other
                elif t == "concat":
                    x = torch.cat(xs, dim=1)
                elif t in ("leaky_relu", "elu"):
                    x = F.leaky_relu(x, a["alpha"]) if t == "leaky_relu" else F.elu(x, a["alpha"])
                else:
                    x = {"relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh}[t](x)
                vals[name] = x
            return x

    net = YamlNet()
    for name, t, _, a in plan:
        if t in ("conv2d", "dense", "batchnorm", "dropout") and hasattr(net, name):
            raise ModelError(f"layer name '{name}' clashes with a torch.nn.Module attribute")
        if t == "conv2d":
            net[name] = nn.Conv2d(a["in"][0], a["filters"], a["kernel"], a["stride"], a["padding"], a["dilation"],
                                  a["groups"], a["bias"])
        elif t == "dense":
            net[name] = nn.Linear(a["in_features"], a["units"], a["bias"])
        elif t == "batchnorm":
            bn = nn.BatchNorm2d if len(a["in"]) == 3 else nn.BatchNorm1d
            net[name] = bn(a["in"][0], eps=a["eps"], momentum=a["momentum"])
        elif t == "dropout":
            net[name] = nn.Dropout(a["p"])
    return net


def make_loss(cfg, device, dtype=None):
    weights = get(cfg, "loss.class_weights", "none")  # "balanced" has no data here: none, as in cnn-bench
    w = (torch.tensor([num(v, "class weight") for v in weights], device=device, dtype=dtype)
         if isinstance(weights, list) else None)
    smoothing = num(get(cfg, "loss.label_smoothing", 0.0), "loss.label_smoothing")
    return lambda logits, labels: F.cross_entropy(logits, labels, weight=w, label_smoothing=smoothing)


def set_tf32(on):
    # The legacy flags, which inductor still reads: setting the new fp32_precision API instead can
    # make torch.compile fail with a "mix of legacy and new APIs" error in PyTorch 2.11.
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def run_bench(args, extra, sets):
    """Runs `cnn-bench model`; returns (command line, error text or None)."""
    argv = [args.cnn_bench, "model", args.model, "--device", args.device, *extra]
    for s in sets:
        argv += ["--set", s]
    try:
        r = subprocess.run(argv, capture_output=True, text=True)
    except OSError as e:
        return " ".join(argv), f"cannot run {args.cnn_bench}: {e}"
    tail = " | ".join((r.stderr.strip() or r.stdout.strip()).splitlines()[-3:])
    return " ".join(argv), (f"exit {r.returncode}: {tail}" if r.returncode else None)


def compare(name, got, ref, floor=0.0, note=""):
    """Relative L2 error ||got - ref|| / max(||ref||, floor) and the max abs error, in float64."""
    got, ref = got.detach().double(), ref.detach().double().to(got.device)
    if got.shape != ref.shape:
        return dict(tensor=name, rel_err=math.inf, max_abs_err=math.inf, ok=False,
                    note=f"torch shape {tuple(got.shape)}, ours {tuple(ref.shape)}")
    diff, denom = (got - ref).norm().item(), max(ref.norm().item(), floor)
    rel = diff / denom if denom > 0 else (0.0 if diff == 0 else math.inf)
    return dict(tensor=name, rel_err=rel, max_abs_err=(got - ref).abs().max().item() if got.numel() else 0.0,
                ok=rel <= TOLERANCE, note=note)


def check(args, user_plan, batch, device):
    """Our first training step (cnn-bench --dump) against the same step in PyTorch."""
    from safetensors import safe_open
    from safetensors.torch import load_file
    no_dropout = [f"layers.{name}.p=0" for name, t, _, _ in user_plan if t == "dropout"]  # Philox masks differ
    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "first_step.safetensors")
        command, err = run_bench(args, ["--batch", str(batch), "--steps", "1", "--repeats", "1", "--warmup", "0",
                                        "--dump", dump], args.set + no_dropout)
        result = dict(batch=batch, command=command, ok=False, rows=[])
        if err:
            return dict(result, error=f"cnn-bench failed: {err}")
        tensors = load_file(dump, device=str(device))
        with safe_open(dump, framework="pt") as f:
            meta = f.metadata()
    cfg = yaml.safe_load(meta["config"])  # the resolved config cnn-bench ran, dropout p=0 included
    plan = plan_graph(cfg)
    model = build_model(plan).to(device).train()
    params = dict(model.named_parameters())
    try:  # copies; a wrong shape raises, naming the tensor (strict=False: we list the names ourselves)
        loaded = model.load_state_dict({k: v for k, v in tensors.items() if k not in ("input", "labels", "logits")
                                        and not k.startswith("grad.")}, strict=False)
    except RuntimeError as e:
        return dict(result, error=f"tensor shapes differ: {e}")
    missing = [k for k in loaded.missing_keys if not k.endswith(".num_batches_tracked")]  # PyTorch-only buffer
    grads = {k[len("grad."):] for k in tensors if k.startswith("grad.")}
    if missing or loaded.unexpected_keys or grads != set(params):
        return dict(result, error=f"tensor names differ: not in the dump {missing}, not in the torch model "
                    f"{loaded.unexpected_keys}, gradients of only one side {sorted(grads ^ set(params))}")
    # The same step in float64 is the arbiter where FP32 rounding decides (a ReLU or max-pool input
    # within rounding of its threshold flips a mask): ours passes a tensor when it is within
    # TOLERANCE of PyTorch FP32, or at most 2x as far from float64 as PyTorch FP32 is.
    model64 = build_model(plan).to(device).double().train()
    model64.load_state_dict(model.state_dict())
    labels = tensors["labels"].long()
    logits = model(tensors["input"])
    loss = make_loss(cfg, device)(logits, labels)
    logits64 = model64(tensors["input"].double())
    loss64 = make_loss(cfg, device, torch.float64)(logits64, labels)
    ours_loss = torch.tensor(float(meta["loss"]), dtype=torch.float64)
    rows = [arbitrate(compare("logits", logits, tensors["logits"]), tensors["logits"], logits, logits64),
            arbitrate(compare("loss", loss, ours_loss), ours_loss, loss, loss64)]
    if get(cfg, "loss.label_smoothing", 0) and isinstance(get(cfg, "loss.class_weights"), list):
        rows[-1]["note"] = "PyTorch weights the smoothing term per class, we by the label's weight"
    loss.backward()
    loss64.backward()
    params64 = dict(model64.named_parameters())
    cancelling = bias_before_batchnorm(plan)
    for name, p in params.items():
        floor, note = 0.0, ""
        if name in cancelling:  # rounding noise on both sides: measured on the weight gradient's scale
            floor = tensors[f"grad.{name.rsplit('.', 1)[0]}.weight"].double().norm().item()
            note = "bias before batchnorm: relative to the weight gradient"
        ours = tensors[f"grad.{name}"]
        rows.append(arbitrate(compare(f"grad.{name}", p.grad, ours, floor, note), ours, p.grad, params64[name].grad,
                              floor))
    return dict(result, rows=rows, ok=all(r["ok"] for r in rows), loss_ours=ours_loss.item(), loss_torch=loss.item())


def arbitrate(row, ours, torch32, ref64, floor=0.0):
    """Adds both FP32 results' relative errors against float64; a row over TOLERANCE against PyTorch
    still passes when ours is at most twice as far from float64 as PyTorch's FP32 result is."""
    ref = ref64.detach().double()
    denom = max(ref.norm().item(), floor)
    err = lambda t: (t.detach().double().to(ref.device) - ref).norm().item() / denom if denom > 0 else 0.0  # noqa
    row["ours_vs_fp64"], row["torch_vs_fp64"] = err(ours), err(torch32)
    if not row["ok"] and math.isfinite(row["rel_err"]) and row["ours_vs_fp64"] <= 2 * row["torch_vs_fp64"]:
        row["ok"] = True
        row["note"] = (row["note"] + "; " if row["note"] else "") + (
            f"FP32 rounding: vs float64 ours {row['ours_vs_fp64']:.1e}, PyTorch FP32 {row['torch_vs_fp64']:.1e}")
    return row


def time_steps(step, warmup, steps, repeats):
    """Mean step time in ms of each repeat: CUDA events around `steps` steps, after `warmup` steps."""
    for _ in range(warmup):
        step()
    start, end, ms = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True), []
    for _ in range(repeats):
        start.record()
        for _ in range(steps):
            step()
        end.record()
        end.synchronize()
        ms.append(start.elapsed_time(end) / steps)
    return ms


def time_mode(mode, plan, cfg, batch, args, device):
    """One PyTorch mode at one batch size: a fresh model, optimizer and synthetic batch."""
    torch.manual_seed(0)
    model = build_model(plan).to(device).train()
    x = torch.randn(batch, *input_shape(cfg), device=device)
    bf16 = args.precision == "bf16"
    if bf16:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, plan[-1][3]["out"][0], (batch,), device=device)
    cls, kw = optimizer_spec(cfg, lr_scale=1e-3)
    if mode == "graph" and cls != "SGD":
        kw["capturable"] = True  # step counters stay on the GPU, so the update can be captured
    opt = getattr(torch.optim, cls)(model.parameters(), **kw)
    params, loss_fn = list(model.parameters()), make_loss(cfg, device)
    clip = num(get(cfg, "train.clip_grad_norm", 0.0), "train.clip_grad_norm")
    if mode == "compile":
        torch._dynamo.reset()  # a fresh compilation per batch size, never a dynamic-shape one
    forward, info = (torch.compile(model) if mode == "compile" else model), {}

    def body():
        if bf16:
            with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=mode != "graph"):
                loss = loss_fn(forward(x), y)
            loss.backward()
        else:
            loss_fn(forward(x), y).backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()

    def step():
        opt.zero_grad(set_to_none=True)
        body()

    if mode == "compile":
        t0 = time.perf_counter()
        step()  # compiles forward and backward; reported apart from the timing
        torch.cuda.synchronize()
        info["compile_s"] = time.perf_counter() - t0
    elif mode == "graph":  # whole-network capture as in PyTorch's "CUDA semantics" notes
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            body()
        step = graph.replay
    ms = time_steps(step, args.warmup, args.steps, args.repeats)
    return dict(info, step_ms=statistics.median(ms), img_per_s=1000.0 * batch / statistics.median(ms),
                repeat_img_per_s=[1000.0 * batch / m for m in ms])


def time_ours(args, batch):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "ours.json")
        command, err = run_bench(args, ["--batch", str(batch), "--steps", str(args.steps), "--repeats",
                                        str(args.repeats), "--warmup", str(args.warmup), "--json", out,
                                        "--precision", args.precision], args.set)
        if err:
            return dict(error=err, command=command)
        with open(out) as f:
            j = json.load(f)
    # The autotuner's picks (a line per layer): two runs' figures differ with them, so keep them.
    return dict(step_ms=j["step_ms"], img_per_s=j["img_per_s"], repeat_img_per_s=j.get("repeat_img_per_s"),
                device=j.get("device"), precision=j.get("precision"), decisions=j.get("decisions"),
                command=command)


def print_table(header, rows):
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    for row in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="model YAML file")
    p.add_argument("--cnn-bench", default="build/app/cnn-bench", help="our benchmark binary (default %(default)s)")
    p.add_argument("--batch", type=int, action="append", help="batch size, repeatable (default train.batch_size)")
    p.add_argument("--device", default="cuda", help="CUDA device of both (default %(default)s)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per repeat (default %(default)s)")
    p.add_argument("--repeats", type=int, default=5, help="repeats; the median is reported (default %(default)s)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (default %(default)s)")
    p.add_argument("--modes", default=",".join(MODES), help="PyTorch modes to time (default %(default)s)")
    p.add_argument("--json", help="write everything (check, timings, versions) to this file")
    p.add_argument("--no-check", action="store_true", help="skip the logits/loss/gradient check")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override, repeatable")
    p.add_argument("--backend", choices=("auto", "cuda", "cudnn"),
                   help="our side's train.backend (the same as --set train.backend=X), e.g. cudnn to check the "
                        "accuracy-guarded cuDNN choices")
    p.add_argument("--precision", choices=("fp32", "tf32", "bf16"), default="fp32",
                   help="precision of both sides' timings: ours --precision P, PyTorch's TF32 flags on for tf32, "
                        "autocast bf16 + channels_last for bf16 (default %(default)s; the check: FP32, TF32 off)")
    p.add_argument("--tf32", choices=("off", "on"),
                   help="TF32 in the PyTorch timings alone (default: on for --precision tf32, else off)")
    p.add_argument("--ddp", type=int, metavar="N",
                   help="instead: PyTorch DistributedDataParallel on N local GPUs at the per-GPU --batch "
                        "(tools/pytorch_ddp.py; what tools/scaling.sh compares against)")
    args = p.parse_args(argv)
    if args.tf32 is None:
        args.tf32 = "on" if args.precision == "tf32" else "off"
    if args.backend:
        args.set.append(f"train.backend={args.backend}")
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not args.modes or any(m not in MODES for m in args.modes):
        p.error(f"--modes: a comma-separated list of {','.join(MODES)}")
    if args.steps < 1 or args.repeats < 1 or args.warmup < 0 or min(args.batch or [1]) < 1:
        p.error("--steps, --repeats and --batch must be >= 1, --warmup >= 0")
    if not args.device.startswith("cuda"):
        p.error("--device must be a CUDA device: the timings use CUDA events")
    return args


def print_check(c):
    print(f"check at batch {c['batch']} (FP32, TF32 off, dropout p=0): {c['command']}")
    print_table(["tensor", "rel err", "max abs err", "ours vs fp64", "torch vs fp64", "status"],
                [[r["tensor"], f"{r['rel_err']:.2e}", f"{r['max_abs_err']:.2e}", f"{r.get('ours_vs_fp64', 0):.1e}",
                  f"{r.get('torch_vs_fp64', 0):.1e}",
                  ("ok" if r["ok"] else "FAIL") + (f" ({r['note']})" if r["note"] else "")] for r in c["rows"]])
    print((c.get("error") or f"check {'passed' if c['ok'] else 'FAILED'}: tolerance {TOLERANCE:g}, relative L2") + "\n")


def timing_row(args, plan, cfg, batch, device):
    torch.cuda.empty_cache()  # leave our binary the memory PyTorch's allocator keeps cached
    row = dict(batch=batch, ours=time_ours(args, batch))
    for mode in args.modes:
        try:
            row[mode] = time_mode(mode, plan, cfg, batch, args, device)
        except Exception as e:  # reported, never hidden: the table says "failed"
            row[mode] = dict(error=f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}")
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    speeds = {m: row[m]["img_per_s"] for m in args.modes if "img_per_s" in row[m]}
    best = max(speeds, key=speeds.get) if speeds else None
    ours = row["ours"].get("img_per_s")
    return dict(row, best_pytorch=best, ratio_ours_over_best=ours / speeds[best] if ours and best else None)


def main(argv=None):
    args = parse_args(argv)
    if args.ddp:
        import pytorch_ddp
        ddp_argv = [args.model, "--gpus", str(args.ddp), "--steps", str(args.steps), "--repeats", str(args.repeats),
                    "--warmup", str(args.warmup), "--tf32", args.tf32]
        ddp_argv += ["--batch", str(args.batch[0])] if args.batch else []
        ddp_argv += ["--json", args.json] if args.json else []
        for s in args.set:
            ddp_argv += ["--set", s]
        return pytorch_ddp.main(ddp_argv)
    try:
        with open(args.model) as f:
            cfg = yaml.safe_load(f)
        for s in args.set:
            apply_set(cfg, s)
        plan = plan_graph(cfg)
        optimizer_spec(cfg)
    except (OSError, yaml.YAMLError, ModelError) as e:
        print(f"compare_pytorch: error: {args.model}: {e}", file=sys.stderr)
        return 2
    if torch is None or not torch.cuda.is_available():
        print("compare_pytorch: error: needs PyTorch with a usable CUDA GPU", file=sys.stderr)
        return 1
    device = torch.device(args.device)
    batches = args.batch or [int(num(get(cfg, "train.batch_size", 64), "train.batch_size"))]
    try:
        ours_version = subprocess.run([args.cnn_bench, "--version"], capture_output=True, text=True).stdout.strip()
    except OSError:
        ours_version = None
    report = dict(model=cfg.get("name", os.path.basename(args.model)), file=args.model, sets=args.set,
                  gpu=torch.cuda.get_device_name(device), precision=args.precision, tf32=args.tf32 == "on",
                  cudnn_benchmark=True,
                  steps=args.steps, warmup=args.warmup, repeats=args.repeats,
                  versions=dict(python=sys.version.split()[0], torch=torch.__version__, cuda=torch.version.cuda,
                                cudnn=torch.backends.cudnn.version(), cnn_bench=ours_version))
    ok = True
    if not args.no_check:
        set_tf32(False)
        torch.backends.cudnn.benchmark = False
        try:
            report["check"] = check(args, plan, batches[0], device)
        except ModelError as e:
            report["check"] = dict(batch=batches[0], command="", ok=False, rows=[], error=f"dumped config: {e}")
        print_check(report["check"])
        ok = report["check"]["ok"]
    set_tf32(args.tf32 == "on")
    torch.backends.cudnn.benchmark = True  # what PyTorch users set for fixed shapes
    report["results"] = [timing_row(args, plan, cfg, b, device) for b in batches]
    print(f"training steps on {report['gpu']}: img/s, median of {args.repeats} x {args.steps} steps, "
          f"ours --precision {args.precision}, PyTorch TF32 {args.tf32}, torch {torch.__version__}")
    cell = lambda r: f"{r['img_per_s']:,.0f}" if "img_per_s" in r else ("failed" if "error" in r else "-")  # noqa
    print_table(["model", "batch", f"ours ({args.precision})", *MODES, "best", "ours/best"],
                [[report["model"], r["batch"], cell(r["ours"]), *[cell(r.get(m, {})) for m in MODES],
                  r["best_pytorch"] or "-", f"{r['ratio_ours_over_best']:.2f}" if r["ratio_ours_over_best"] else "-"]
                 for r in report["results"]])
    for r in report["results"]:
        for k in ["ours", *args.modes]:
            if "error" in r[k]:
                print(f"  batch {r['batch']} {k} failed: {r[k]['error']}")
        if "compile_s" in r.get("compile", {}):
            print(f"  batch {r['batch']} compile: the first step (compilation) took {r['compile']['compile_s']:.1f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2, default=str)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

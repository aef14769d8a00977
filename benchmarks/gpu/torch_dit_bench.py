"""PyTorch baseline of bench_train: the same DiT (tools/torch_dit.py), the same training step.

One step = forward, the DiT hybrid loss (MSE + VB with learned sigma, as the official
training_losses), backward, AdamW, EMA update; random latents and labels on the device. On CUDA:
bf16 autocast and PyTorch's scaled_dot_product_attention, steps timed with torch.cuda.Event after
warm-up, median reported. FLOPs per training image use bench_train's count (3 x the forward FLOPs
of DiTConfig::forward_flops), so TFLOP/s and MFU compare one to one.

    python3 benchmarks/gpu/torch_dit_bench.py --model DiT-XL/2 --batch 256 --steps 20 --json t.json
    /usr/bin/python3 benchmarks/gpu/torch_dit_bench.py --model DiT-S/4 --input-size 16 --batch 4 \
        --steps 3 --warmup 1 --device cpu          # smoke test without a GPU
"""

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import torch_dit  # noqa: E402

# The DiT paper's forward GMACs (its "Gflops", Table 4) at 256x256 images (32x32 latents).
PAPER_GMACS = {"DiT-S/8": 0.36, "DiT-S/4": 1.41, "DiT-S/2": 6.06, "DiT-B/8": 1.42,
               "DiT-B/4": 5.56, "DiT-B/2": 23.01, "DiT-L/8": 4.91, "DiT-L/4": 19.70,
               "DiT-L/2": 80.71, "DiT-XL/8": 7.39, "DiT-XL/4": 29.05, "DiT-XL/2": 118.64}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="DiT-S/4")
    p.add_argument("--input-size", type=int, default=32)
    p.add_argument("--channels", type=int, default=4)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--device", default="auto", help="cuda, cpu or auto (cuda when available)")
    p.add_argument("--precision", default="auto",
                   help="bf16 (autocast) or fp32; auto: bf16 on cuda, fp32 on cpu")
    p.add_argument("--peak-tflops", type=float, default=0.0,
                   help="peak for MFU (default: 989 on cuda, 0.215 on cpu)")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--ema-decay", type=float, default=0.9999)
    p.add_argument("--compile", action="store_true", help="torch.compile the model (not the default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default="")
    p.add_argument("--name", default="")
    a = p.parse_args()
    if not a.model.startswith("DiT-"):
        a.model = "DiT-" + a.model
    if a.device == "auto":
        a.device = "cuda" if torch.cuda.is_available() else "cpu"
    if a.precision == "auto":
        a.precision = "bf16" if a.device == "cuda" else "fp32"
    if a.precision not in ("bf16", "fp32"):
        p.error(f"--precision {a.precision}: expected bf16 or fp32")
    if a.steps < 1 or a.warmup < 0 or a.batch < 1:
        p.error("--steps >= 1, --warmup >= 0 and --batch >= 1 are required")
    a.name = a.name or a.model
    return a


def forward_flops(model, input_size, channels):
    """FLOPs (2 per multiply-add) of one image's forward pass: DiTConfig::forward_flops."""
    blocks = model.blocks
    d = model.x_embedder.proj.out_channels
    m = blocks[0].mlp.fc1.out_features
    p = model.patch_size
    t = (input_size // p) ** 2
    block = 2 * t * d * (3 * d + d + 2 * m) + 4 * t * t * d + 2 * 6 * d * d
    embed = 2 * t * d * channels * p * p
    final = 2 * t * d * p * p * model.out_channels + 2 * 2 * d * d
    return len(blocks) * block + embed + final


def keep_schedule_on_device():
    """torch_dit._extract copies a float64 numpy table to the device at every call; a blocking
    host-to-device copy stalls the host between forward and backward. Cache each table on the
    device (keyed by its bytes, so the values are exactly those of the original)."""
    cache = {}

    def extract(arr, t, like):
        key = (arr.tobytes(), str(t.device))
        table = cache.get(key)
        if table is None:
            table = torch.from_numpy(arr).float().to(t.device)
            cache[key] = table
        res = table[t].to(like.dtype)
        return res.view(-1, *([1] * (like.dim() - 1))).expand_as(like)

    torch_dit._extract = extract


def make_step(a, model, diffusion, opt, ema, params, device):
    autocast = a.device == "cuda" and a.precision == "bf16"

    def fp32_output(x, t, y):
        return model(x, t, y).float()  # the loss in fp32, as mixed-precision DiT trainers do

    def step():
        shape = (a.batch, a.channels, a.input_size, a.input_size)
        x_start = torch.randn(shape, device=device)
        noise = torch.randn(shape, device=device)
        t = torch.randint(0, diffusion.num_timesteps, (a.batch,), device=device)
        y = torch.randint(0, a.num_classes, (a.batch,), device=device)
        with torch.autocast(device_type=a.device, dtype=torch.bfloat16, enabled=autocast):
            loss = diffusion.training_losses(fp32_output, x_start, t, y, noise)["loss"].mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        with torch.no_grad():
            torch._foreach_mul_(ema, a.ema_decay)
            torch._foreach_add_(ema, params, alpha=1 - a.ema_decay)
        return loss.detach()

    return step


def build(a):
    torch.manual_seed(a.seed)
    device = torch.device(a.device)
    # Built on the device where torch can (2.0+): a host init of DiT-XL/2 takes seconds.
    on_device = torch.device(device) if hasattr(torch.device, "__enter__") else contextlib.nullcontext()
    with on_device:
        model = torch_dit.dit_from_preset(a.model, input_size=a.input_size, in_channels=a.channels,
                                          num_classes=a.num_classes).to(device)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    try:
        opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.0, fused=a.device == "cuda")
    except (TypeError, RuntimeError):  # torch < 2.0 has no fused AdamW
        opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.0)
    ema = [p.detach().clone() for p in params]
    diffusion = torch_dit.Diffusion(respacing="", learn_sigma=True)
    if diffusion.timestep_map == list(range(diffusion.num_timesteps)):
        diffusion.model_t = lambda t: t  # identity map: skip the host list -> device copy
    keep_schedule_on_device()
    compiled = torch.compile(model) if a.compile else model
    return model, make_step(a, compiled, diffusion, opt, ema, params, device)


def time_steps(a, step):
    """Per-step milliseconds of the timed steps, and their losses."""
    for _ in range(a.warmup):
        step()
    cuda = a.device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(a.steps)]
    ms, losses = [], []
    for i in range(a.steps):
        if cuda:
            events[i][0].record()
        else:
            t0 = time.perf_counter()
        losses.append(step())
        if cuda:
            events[i][1].record()
        else:
            ms.append(1e3 * (time.perf_counter() - t0))
    if cuda:
        torch.cuda.synchronize()
        ms = [s.elapsed_time(e) for s, e in events]
    return ms, [float(v) for v in losses]


def quantile(v, q):
    s = sorted(v)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (pos - lo) * (s[hi] - s[lo])


def main():
    a = parse_args()
    # The GPU script's own test (tests/cli/gpu_check.sh) checks that run.sh retries the baseline
    # at a smaller batch after an out-of-memory failure: DIT_BENCH_OOM_ABOVE=N makes a batch over N
    # fail the way PyTorch does when the device is full.
    oom_above = int(os.environ.get("DIT_BENCH_OOM_ABOVE", "0") or 0)
    if oom_above and a.batch > oom_above:
        sys.exit(f"RuntimeError: CUDA out of memory (simulated by DIT_BENCH_OOM_ABOVE={oom_above} "
                 f"at batch {a.batch})")
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # as dit_mp: TF32 off unless asked
    model, step = build(a)
    n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    flops = 3.0 * forward_flops(model, a.input_size, a.channels)
    paper = 6e9 * PAPER_GMACS.get(a.model, 0.0) if a.input_size == 32 else 0.0
    peak = a.peak_tflops or (989.0 if a.device == "cuda" else 0.215)
    sdpa = torch_dit.Attention.fused
    gpu = torch.cuda.get_device_name() if a.device == "cuda" else "cpu"
    print(f"torch_dit_bench: {a.model} ({n_params} parameters), torch {torch.__version__} on {gpu}, "
          f"{a.precision}{' autocast' if a.device == 'cuda' and a.precision == 'bf16' else ''}, "
          f"attention: {'scaled_dot_product_attention' if sdpa else 'explicit softmax'}, "
          f"batch {a.batch}", flush=True)
    ms, losses = time_steps(a, step)
    med = statistics.median(ms)
    images_s = a.batch / (med / 1e3)
    tflops = flops * images_s / 1e12
    finite = all(math.isfinite(v) for v in losses)
    res = {"name": a.name, "impl": "torch", "model": a.model, "input_size": a.input_size,
           "channels": a.channels, "backend": a.device, "precision": a.precision,
           "batch": a.batch, "micro_batch": a.batch, "ranks": 1, "steps": a.steps,
           "warmup": a.warmup, "params": n_params, "flops_per_image": flops,
           "paper_flops_per_image": paper, "images_per_s": images_s, "ms_per_step": med,
           "ms_per_step_min": min(ms), "ms_per_step_p10": quantile(ms, 0.1),
           "ms_per_step_p90": quantile(ms, 0.9), "ms_per_step_max": max(ms), "tflops": tflops,
           "mfu": tflops / peak, "peak_tflops_per_unit": peak, "peak_units": 1, "final_loss": losses[-1],
           "loss_finite": finite, "sdpa": sdpa, "compiled": a.compile, "torch": torch.__version__,
           "device_name": gpu}
    if a.device == "cuda":
        res["peak_mem_bytes"] = torch.cuda.max_memory_allocated()
    paper_note = ""
    if paper and abs(paper / flops - 1) > 0.01:
        paper_note = f"; the paper's 6 x {PAPER_GMACS[a.model]} GMACs = {paper / 1e9:.1f} GFLOP"
    print(f"{a.name}: images/s {images_s:.2f}   ms/step median {med:.2f} (min {min(ms):.2f}, "
          f"p10 {quantile(ms, 0.1):.2f}, p90 {quantile(ms, 0.9):.2f}, max {max(ms):.2f})\n"
          f"  TFLOP/s {tflops:.2f}, MFU {100 * tflops / peak:.1f}% of {peak:g} TFLOP/s; "
          f"{flops / 1e9:.1f} GFLOP per training image (3 x forward){paper_note}; "
          f"final loss {losses[-1]:.4f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f)
            f.write("\n")
    if not finite:
        print("torch_dit_bench: the loss became NaN or Inf", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())

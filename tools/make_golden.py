"""Write a golden DiT file (schema: the project's golden README) for any config, in float64.

Reference numbers come from tools/torch_dit.py, a PyTorch reimplementation of the official DiT that
tools/check_golden.py checks against the official golden file. Example:
  /usr/bin/python3 tools/make_golden.py --input-size 12 --patch-size 4 --in-channels 3 \
      --hidden-size 48 --depth 3 --num-heads 3 --mlp-ratio 2.0 --num-classes 5 \
      --no-learn-sigma --batch 2 --seed 1 --out tests/data/dit_alt_nosigma_golden.h5
"""

import argparse
import os
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_dit  # noqa: E402
from dit_checkpoint import load_tensors  # noqa: E402  (tensors only: weights_only=True)

F64 = torch.float64


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input-size", type=int, required=True)
    ap.add_argument("--patch-size", type=int, required=True)
    ap.add_argument("--in-channels", type=int, required=True)
    ap.add_argument("--hidden-size", type=int, required=True)
    ap.add_argument("--depth", type=int, required=True)
    ap.add_argument("--num-heads", type=int, required=True)
    ap.add_argument("--mlp-ratio", type=float, default=4.0)
    ap.add_argument("--num-classes", type=int, required=True)
    ap.add_argument("--learn-sigma", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--class-dropout-prob", type=float, default=0.1)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--respacing", default="10", help="sampling respacing, e.g. 10 or ddim25")
    ap.add_argument("--cfg-scale", type=float, default=4.0)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.999)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--ema-decay", type=float, default=0.9)
    ap.add_argument("--weights-from", help="a .pt state dict to use instead of perturbed random weights")
    ap.add_argument("--prune", action="store_true",
                    help="also write /prune/bi_score: each block's input/output cosine similarity")
    ap.add_argument("--distill", action="store_true",
                    help="also write /distill: TinyFusion's KD loss terms and gradients "
                         "(tools/distill_golden.py, on the model's data shape, tokens and width)")
    ap.add_argument("--tinyfusion", default="/work/.mirror/VainF+TinyFusion/repo",
                    help="with --distill: a TinyFusion checkout or git directory")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    checks = [
        (a.input_size % a.patch_size == 0, "--input-size must be a multiple of --patch-size"),
        (a.hidden_size % a.num_heads == 0, "--hidden-size must be a multiple of --num-heads"),
        (a.hidden_size % 4 == 0, "--hidden-size must be a multiple of 4 (2-D sin-cos pos_embed)"),
        (a.class_dropout_prob > 0, "--class-dropout-prob must be > 0 (the null label is needed)"),
        (a.batch >= 2, "--batch must be >= 2 (the last forward label is the null label)"),
        (min(a.input_size, a.patch_size, a.in_channels, a.depth, a.num_classes) > 0,
         "sizes must be positive"),
    ]
    for ok, msg in checks:
        if not ok:
            ap.error(msg)
    return a


def perturbed_model(a, gen):
    """Official init, then every trainable tensor moved off it (weights + 0.05 N(0,1), biases +
    0.02 N(0,1)) so the adaLN-Zero and output paths, zero at init, carry signal."""
    model = torch_dit.DiT(
        input_size=a.input_size, patch_size=a.patch_size, in_channels=a.in_channels,
        hidden_size=a.hidden_size, depth=a.depth, num_heads=a.num_heads, mlp_ratio=a.mlp_ratio,
        class_dropout_prob=a.class_dropout_prob, num_classes=a.num_classes,
        learn_sigma=a.learn_sigma).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                std = 0.05 if p.dim() >= 2 else 0.02
                p.add_(std * torch.randn(p.shape, generator=gen, dtype=F64))
    return model


def trainable(model):
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def grads_of(model):
    return {n: p.grad.detach().clone() for n, p in trainable(model).items()}


def forward_group(model, a, gen):
    N, C, H = a.batch, a.in_channels, a.input_size
    x = torch.randn(N, C, H, H, generator=gen, dtype=F64)
    t = torch.randint(0, torch_dit.NUM_DIFFUSION_STEPS, (N,), generator=gen).to(F64)
    y = torch.randint(0, a.num_classes, (N,), generator=gen)
    y[-1] = a.num_classes                                   # null label of CFG
    x_var = x.clone().requires_grad_(True)
    model.zero_grad(set_to_none=True)
    out = model(x_var, t, y)
    cot = torch.randn(out.shape, generator=gen, dtype=F64)
    (out * cot).sum().backward()
    g = {"x": x, "t": t, "y": y, "out": out.detach(), "cotangent": cot, "dx": x_var.grad}
    return g, grads_of(model)


def loss_group(model, a, gen):
    N, C, H = a.batch, a.in_channels, a.input_size
    diffusion = torch_dit.Diffusion("", learn_sigma=a.learn_sigma)
    x_start = 0.7 * torch.randn(N, C, H, H, generator=gen, dtype=F64)  # some |x| > 0.999: all
    t = torch.randint(1, diffusion.num_timesteps, (N,), generator=gen)  # likelihood branches
    t[0] = 0                                                # discretized-likelihood branch
    y = torch.randint(0, a.num_classes, (N,), generator=gen)
    noise = torch.randn(N, C, H, H, generator=gen, dtype=F64)
    model.zero_grad(set_to_none=True)
    terms = diffusion.training_losses(model, x_start, t, y, noise)
    terms["loss"].mean().backward()
    g = {"x_start": x_start, "t": t, "y": y, "noise": noise}
    g.update({k: v.detach() for k, v in terms.items()})
    return g, grads_of(model), diffusion.schedule_arrays()


def adamw_ema(model, a, weights, loss_grads):
    """One torch.optim.AdamW step from the weights with the loss grads, then the EMA update."""
    ps = trainable(model)
    with torch.no_grad():
        for n, p in ps.items():
            p.copy_(weights[n])
            p.grad = loss_grads[n].clone()
    opt = torch.optim.AdamW(list(ps.values()), lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps,
                            weight_decay=a.weight_decay)
    opt.step()
    after = {n: p.detach().clone() for n, p in ps.items()}
    ema = {n: a.ema_decay * weights[n] + (1 - a.ema_decay) * after[n] for n in ps}
    with torch.no_grad():
        for n, p in ps.items():
            p.copy_(weights[n])
            p.grad = None
    return after, ema


def sample_group(model, a, gen):
    N, C, H = a.batch, a.in_channels, a.input_size
    diffusion = torch_dit.Diffusion(a.respacing, learn_sigma=a.learn_sigma)
    x_t = torch.randn(N, C, H, H, generator=gen, dtype=F64)
    step = int(torch.randint(1, diffusion.num_timesteps, (1,), generator=gen))
    t = torch.full((N,), step, dtype=torch.int64)           # one step of a sampling loop
    y = torch.randint(0, a.num_classes, (N,), generator=gen)
    noise = torch.randn(N, C, H, H, generator=gen, dtype=F64)
    guided = 3 if a.in_channels >= 3 else a.in_channels     # official: 3; fewer: all eps channels
    with torch.no_grad():
        ddpm = diffusion.p_sample(model, x_t, t, y, noise)
        ddim = diffusion.ddim_sample(model, x_t, t, y)
        cfg_x = torch.cat([x_t, x_t])
        cfg_t = torch.cat([t, t]).to(F64)
        cfg_y = torch.cat([y, torch.full_like(y, a.num_classes)])
        cfg_out = model.forward_with_cfg(cfg_x, cfg_t, cfg_y, a.cfg_scale, guided_channels=guided)
    g = {"timestep_map": torch.tensor(diffusion.timestep_map, dtype=torch.int64),
         "betas": torch.from_numpy(diffusion.betas), "x_t": x_t, "y": y, "t": t,
         "ddpm_noise": noise, "ddpm_out": ddpm["sample"], "pred_xstart": ddpm["pred_xstart"],
         "ddim_out": ddim["sample"]}
    cfg = {"x": cfg_x, "t": cfg_t, "y": cfg_y, "out": cfg_out}
    return g, cfg, guided


def prune_group(model, fwd):
    """Depth pruning's block importance on the forward group's own inputs, as the TinyFusion
    reference (prune_by_score.py compute_BI_score) hooks it: per block, the mean over samples and
    tokens of cosine_similarity(output, input, dim=-1)."""
    scores = []

    def hook(module, inputs, outputs):
        scores.append(torch.nn.functional.cosine_similarity(outputs, inputs[0], dim=-1).mean())

    hooks = [b.register_forward_hook(hook) for b in model.blocks]
    with torch.no_grad():
        model(fwd["x"], fwd["t"], fwd["y"])
    for h in hooks:
        h.remove()
    return {"bi_score": torch.stack(scores)}


def write_group(f, path, tensors):
    grp = f.require_group(path)
    for name, v in tensors.items():
        arr = v.detach().cpu().numpy() if torch.is_tensor(v) else np.asarray(v)
        arr = arr.astype(np.int64 if arr.dtype.kind in "iu" else np.float64)
        grp.create_dataset(name, data=arr, track_times=False)  # byte-reproducible files
    return grp


def write_config(f, a, model):
    c = f.create_group("config").attrs
    ints = dict(input_size=a.input_size, patch_size=a.patch_size, in_channels=a.in_channels,
                hidden_size=a.hidden_size, depth=a.depth, num_heads=a.num_heads,
                num_classes=a.num_classes, out_channels=model.out_channels,
                num_patches=model.x_embedder.num_patches,
                frequency_embedding_size=torch_dit.FREQUENCY_EMBEDDING_SIZE)
    for k, v in ints.items():
        c[k] = np.int64(v)
    c["mlp_ratio"] = np.float64(a.mlp_ratio)
    c["class_dropout_prob"] = np.float64(a.class_dropout_prob)
    c["layernorm_eps"] = np.float64(torch_dit.LAYERNORM_EPS)
    c["learn_sigma"] = np.bool_(a.learn_sigma)
    c["source"] = (f"tools/make_golden.py --seed {a.seed} (tools/torch_dit.py, a PyTorch "
                   f"reimplementation of official DiT models.py and diffusion/), float64")


def main():
    a = parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)                   # the official init draws from the global RNG
    gen = torch.Generator().manual_seed(a.seed)  # perturbations and inputs
    model = perturbed_model(a, gen)
    if a.weights_from:
        state = load_tensors(a.weights_from)
        state = {k: v.to(F64) for k, v in state.items()}
        model.load_state_dict(state, strict=True)
    weights = {n: p.detach().clone() for n, p in model.state_dict().items()}
    fwd, fwd_grads = forward_group(model, a, gen)
    loss, loss_grads, schedule = loss_group(model, a, gen)
    after, ema = adamw_ema(model, a, weights, loss_grads)
    smp, cfg, guided = sample_group(model, a, gen)
    prune = prune_group(model, fwd) if a.prune else None
    distill = None
    if a.distill:
        import distill_golden  # noqa: E402  (imports TinyFusion's diffusion package)
        distill = distill_golden.distill_group(
            gen, a.batch, a.in_channels, a.input_size, model.x_embedder.num_patches, a.hidden_size,
            a.learn_sigma, a.tinyfusion)

    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with h5py.File(a.out, "w") as f:
        write_config(f, a, model)
        f.attrs.create("trainable", np.array(model.trainable_names(), dtype=object),
                       dtype=h5py.string_dtype())
        write_group(f, "weights", weights)
        write_group(f, "forward", fwd)
        write_group(f, "forward/grads", fwd_grads)
        write_group(f, "schedule", {k: torch.from_numpy(v) for k, v in schedule.items()})
        write_group(f, "loss", loss)
        write_group(f, "loss/grads", loss_grads)
        write_group(f, "adamw/params_after", after)
        for k in ("lr", "beta1", "beta2", "eps", "weight_decay"):
            f["adamw"].attrs[k] = np.float64(getattr(a, k))
        write_group(f, "ema/after", ema)
        f["ema"].attrs["decay"] = np.float64(a.ema_decay)
        g = write_group(f, "sample", smp)
        g.attrs["respacing"] = a.respacing
        g = write_group(f, "sample/cfg", cfg)
        g.attrs["scale"] = np.float64(a.cfg_scale)
        g.attrs["guided_channels"] = np.int64(guided)
        if prune is not None:
            write_group(f, "prune", prune)
        if distill is not None:
            distill_golden.write_distill(f, *distill)
    print(f"wrote {a.out} ({os.path.getsize(a.out) / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()

"""Write a golden file of whole DDPM and DDIM sampling loops from the official DiT code, in float64.

The model is an existing DiT golden file's (its /config and /weights; by default
tests/data/dit_tiny_golden.h5, a latent-shaped model: 4 channels at 8x8, learned sigma). The tool
builds facebookresearch/DiT's own `models.DiT` from a checkout, loads those weights, and runs its
`diffusion.create_diffusion(respacing)`'s `p_sample_loop` and `ddim_sample_loop` (eta 0) as the
official `sample.py` does: `forward_with_cfg` on a doubled batch (labels, then the null label),
guidance on the first 3 channels, from given noise. Each loop runs twice: with
`clip_denoised=False`, as `sample.py` and `sample_ddp.py` sample latents, and with
`clip_denoised=True`, the rule for pixels in [-1, 1].

The loops' random draws are given: the initial noise z (key 0) and, for the step at respaced
timestep i, the noise of key i + 1, which dit_mp's sampler draws for that step (engine/sampler.cpp;
both halves of the doubled batch get the same rows, and only the conditional half is kept, as
`sample.py` keeps it). Written (tests/data/README.md, "Whole sampling loops"):

  /config, /weights, attr trainable   copied from --model
  /sample_loop  attrs respacing, cfg_scale, guided_channels
    y (n,) int64; noise (S + 1, n, C, H, W)
    ddpm_out, ddim_out                  clip_denoised=False (n, C, H, W)
    ddpm_out_clipped, ddim_out_clipped  clip_denoised=True

After writing, the stock float32 official code on the same weights and noise must be within 1e-5
relative L2 of every float64 loop (a self-check), and the clipped and unclipped loops must differ
(else the file could not tell the two rules apart).

  /usr/bin/python3 tools/make_sample_loop_golden.py --dit DIT_CHECKOUT \
      --out tests/data/dit_sample_loop_golden.h5
"""

import argparse
import os
import shlex
import subprocess
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_shims as rs  # noqa: E402

F64 = torch.float64
HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dit", required=True, help="a checkout of facebookresearch/DiT")
    ap.add_argument("--model", default=os.path.join(HERE, "..", "tests", "data", "dit_tiny_golden.h5"),
                    help="a DiT golden file whose /config and /weights are the model")
    ap.add_argument("--labels", default="3,0,7", help="the class of each sample")
    ap.add_argument("--respacing", default="8", help="respaced steps (an integer, as sample.py's)")
    ap.add_argument("--cfg-scale", type=float, default=4.0)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--out", required=True)
    return ap.parse_args()


class GivenNoise:
    """torch.randn_like(x) inside the loops returns the next of `draws` (each (n, C, H, W)),
    repeated over the doubled batch; every draw must be used, in order, once per loop."""

    def __init__(self, draws):
        self.draws, self.k = draws, 0

    def __enter__(self):
        self.orig = torch.randn_like

        def fake(x, **kwargs):
            if self.k >= len(self.draws):
                raise RuntimeError("GivenNoise: more draws than steps")
            z = self.draws[self.k]
            self.k += 1
            reps = x.shape[0] // z.shape[0]
            return torch.cat([z] * reps).to(kwargs.get("dtype") or x.dtype)

        torch.randn_like = fake
        return self

    def __exit__(self, *exc):
        torch.randn_like = self.orig
        if exc[0] is None and self.k != len(self.draws):
            raise RuntimeError(f"GivenNoise: {self.k} of {len(self.draws)} draws used")


def build_model(dit_models, cfg, weights, dtype):
    net = dit_models.DiT(input_size=int(cfg["input_size"]), patch_size=int(cfg["patch_size"]),
                         in_channels=int(cfg["in_channels"]), hidden_size=int(cfg["hidden_size"]),
                         depth=int(cfg["depth"]), num_heads=int(cfg["num_heads"]),
                         mlp_ratio=float(cfg["mlp_ratio"]), class_dropout_prob=float(cfg["class_dropout_prob"]),
                         num_classes=int(cfg["num_classes"]), learn_sigma=bool(cfg["learn_sigma"]))
    net.load_state_dict({k: torch.from_numpy(v).to(dtype) for k, v in weights.items()}, strict=True)
    return net.to(dtype).eval()


def loops(diffusion_mod, net, a, y, noise, num_classes):
    """The four loops on one model: {ddpm,ddim}_out and their _clipped twins, conditional half."""
    diff = diffusion_mod.create_diffusion(a.respacing)
    S = diff.num_timesteps
    z = torch.cat([noise[0], noise[0]])
    kwargs = dict(y=torch.cat([y, torch.full_like(y, num_classes)]), cfg_scale=a.cfg_scale)
    # p_sample_loop visits i = S-1 ... 0 and draws once per step: the noise of key i + 1.
    draws = [noise[i + 1] for i in reversed(range(S))]
    out = {}
    with torch.no_grad():
        for clip in (False, True):
            suffix = "_clipped" if clip else ""
            with GivenNoise(draws):
                s = diff.p_sample_loop(net.forward_with_cfg, z.shape, z.clone(), clip_denoised=clip,
                                       model_kwargs=kwargs, progress=False, device="cpu")
            out["ddpm_out" + suffix] = s.chunk(2)[0]
            with GivenNoise(draws):  # eta 0: the draws are multiplied by sigma = 0
                s = diff.ddim_sample_loop(net.forward_with_cfg, z.shape, z.clone(), clip_denoised=clip,
                                          model_kwargs=kwargs, progress=False, device="cpu", eta=0.0)
            out["ddim_out" + suffix] = s.chunk(2)[0]
    return out, S


def rel_l2(a, b):
    return float((a - b).norm() / b.norm())


def main():
    a = parse_args()
    torch.set_num_threads(1)
    rs.install()
    refs = rs.import_repo(a.dit, ["models", "diffusion"])
    with h5py.File(a.model, "r") as f:
        cfg = dict(f["config"].attrs)
        weights = {k: f["weights"][k][()] for k in f["weights"]}
        trainable = list(f.attrs["trainable"])
    assert int(cfg["num_classes"]) > 0
    y = torch.tensor([int(c) for c in a.labels.split(",")], dtype=torch.int64)
    n, C, H = len(y), int(cfg["in_channels"]), int(cfg["input_size"])
    S = int(a.respacing)
    gen = torch.Generator().manual_seed(a.seed)
    noise = torch.randn(S + 1, n, C, H, H, generator=gen, dtype=F64)

    with rs.Float64(round_float=True):
        net = build_model(refs["models"], cfg, weights, F64)
        res, steps = loops(refs["diffusion"], net, a, y, noise, int(cfg["num_classes"]))
    assert steps == S, f"respacing {a.respacing} gave {steps} steps"

    commit = subprocess.run(["git", "-C", a.dit, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    source = " ".join(shlex.quote(x) for x in ["/usr/bin/python3"] + sys.argv) + \
        f" [dit {a.dit} @ {commit or 'unknown'}] float64"
    with h5py.File(a.out, "w") as f:
        g = f.create_group("config")
        for k, v in cfg.items():
            g.attrs[k] = v
        g.attrs["source"] = source
        f.attrs.create("trainable", np.array(trainable, dtype=object), dtype=h5py.string_dtype())
        w = f.create_group("weights")
        for k, v in weights.items():
            w[k] = v
        s = f.create_group("sample_loop")
        s.attrs["respacing"] = a.respacing
        s.attrs["cfg_scale"] = np.float64(a.cfg_scale)
        s.attrs["guided_channels"] = np.int64(min(3, C))
        s["y"] = y.numpy()
        s["noise"] = noise.numpy()
        for k, v in res.items():
            s[k] = v.numpy()
    print(f"wrote {a.out} ({os.path.getsize(a.out) / 1e3:.0f} KB)")

    # Self-checks: the stock float32 code agrees; the two clip rules give different samples.
    ok = True
    net32 = build_model(refs["models"], cfg, weights, torch.float32)
    res32, _ = loops(refs["diffusion"], net32, a, y, noise.float(), int(cfg["num_classes"]))
    for k in res:
        err = rel_l2(res32[k].to(F64), res[k])
        print(f"  float32 vs float64 {k}: {err:.2e}")
        ok &= err < 1e-5
    for k in ("ddpm_out", "ddim_out"):
        d = rel_l2(res[k + "_clipped"], res[k])
        print(f"  {k}: clipped vs unclipped differ by {d:.3f} (relative L2); unclipped max |x| "
              f"{res[k].abs().max().item():.2f}")
        ok &= d > 0.05
    if not ok:
        print("self-check FAILED", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Write a golden file of the extended schema (tests/data/README.md) from the reference code, in float64.

The numbers come from the reference repositories' own modules, imported from checkouts given on
the command line (tools/ref_shims.py supplies what Debian's PyTorch 1.13 lacks and turns their
float32 casts into float64):
- `--family lightning`: hustvl/LightningDiT `models/lightningdit.py` (with `models/rmsnorm.py`,
  `models/swiglu_ffn.py`, `models/pos_embed.py`) and its `transport/` (flow loss, cosine term,
  logit-normal sampling, ODE samplers, classifier-free guidance with its interval);
- `--family sit`: willisma/SiT `models.py` and `transport/` (flow loss, ODE and SDE samplers);
- `--family ddpm`: facebookresearch/DiT `models.py` and `diffusion/` (schedule, DDPM/DDIM steps,
  cfg) with the min-SNR-gamma weighting of TiankaiHang/Min-SNR-Diffusion-Training
  `guided_diffusion/gaussian_diffusion.py` (its `GaussianDiffusion.training_losses`, built on DiT's
  betas and DiT's model/variance types; the tool checks that with `constant` weighting it equals
  DiT's own `training_losses`); with `--no-min-snr` the loss is DiT's own `training_losses`, so
  the whole file is the official DiT code's (tests/data/dit_tiny_golden.h5).
The SDE sampler (`euler_maruyama`) is SiT's `Sampler.sample_sde`; LightningDiT's transport is the
same code, so a lightning file gets it from LightningDiT's copy.

Every reference module named above is imported and run; none had to be mirrored. Only the
reference's random draws are replaced by given tensors: the flow loss's (t, x0) through
`Transport.sample`, the logit-normal normals through `norm.rvs` in LightningDiT's transport module,
the SDE's Wiener increment and DDPM's noise through `torch.randn` / `torch.randn_like` (see
ref_shims.given_randn). After writing, the tool re-runs everything in the references' stock float32
and reports relative L2 errors against the float64 file (must be < 1e-5), and compares a few
parameter gradients with central finite differences in float64.

`--verify FILE... --lightningdit L --sit S` instead recomputes every dataset of existing flow
files from their own weights and inputs (tolerance 1e-12; DDPM files: tools/check_golden.py).

Example (the shipped lightning file):
  /usr/bin/python3 tools/make_flow_golden.py --family lightning \
      --lightningdit /work/ref/hustvl+LightningDiT --sit /work/ref/willisma+SiT \
      --mlp swiglu --norm rmsnorm --pos-embed rope --qk-norm --cosine-loss \
      --timestep-sampling logit_normal --out tests/data/lightning_tiny_golden.h5
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
from make_golden import adamw_ema, write_group  # noqa: E402

F64 = torch.float64


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", choices=["lightning", "sit", "ddpm"], required=True)
    ap.add_argument("--lightningdit", help="checkout of hustvl/LightningDiT")
    ap.add_argument("--sit", help="checkout of willisma/SiT")
    ap.add_argument("--dit", help="checkout of facebookresearch/DiT (family ddpm)")
    ap.add_argument("--minsnr", help="checkout of TiankaiHang/Min-SNR-Diffusion-Training")
    ap.add_argument("--input-size", type=int, default=8)
    ap.add_argument("--patch-size", type=int, default=2)
    ap.add_argument("--in-channels", type=int, default=4)
    ap.add_argument("--hidden-size", type=int, default=32)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--num-heads", type=int, default=4)
    ap.add_argument("--mlp-ratio", type=float, default=3.0)
    ap.add_argument("--num-classes", type=int, default=10)
    ap.add_argument("--class-dropout-prob", type=float, default=0.1)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mlp", choices=["gelu", "swiglu"], default="gelu")
    ap.add_argument("--norm", choices=["layernorm", "rmsnorm"], default="layernorm")
    ap.add_argument("--pos-embed", choices=["sincos", "rope"], default="sincos")
    ap.add_argument("--qk-norm", action="store_true")
    ap.add_argument("--cosine-loss", action="store_true")
    ap.add_argument("--timestep-sampling", choices=["uniform", "logit_normal"], default="uniform")
    ap.add_argument("--logit-normal-mean", type=float, default=0.3)
    ap.add_argument("--logit-normal-std", type=float, default=0.8)
    ap.add_argument("--min-snr-gamma", type=float, default=5.0)
    ap.add_argument("--no-min-snr", action="store_true", help="family ddpm: loss_weight none")
    ap.add_argument("--respacing", default="10")
    ap.add_argument("--cfg-scale", type=float, default=4.0)
    ap.add_argument("--cfg-interval-start", type=float, default=0.15,
                    help="lightning: guidance only where t >= this (t = 1 is data)")
    ap.add_argument("--ode-steps", type=int, default=10, help="grid points of the ODE samplers")
    ap.add_argument("--sde-steps", type=int, default=10, help="grid points of the SDE sampler")
    ap.add_argument("--diffusion-form", default="sigma")
    ap.add_argument("--diffusion-norm", type=float, default=1.0)
    ap.add_argument("--last-step", default="Mean")
    ap.add_argument("--last-step-size", type=float, default=0.04)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.999)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--ema-decay", type=float, default=0.9)
    ap.add_argument("--no-self-check", action="store_true")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    need = {"lightning": ["lightningdit", "sit"], "sit": ["sit"], "ddpm": ["dit", "minsnr"]}
    for k in need[a.family]:
        if not getattr(a, k):
            ap.error(f"--family {a.family} needs --{k} (a checkout of the reference)")
    if a.family != "lightning" and (a.mlp != "gelu" or a.norm != "layernorm" or
                                    a.pos_embed != "sincos" or a.qk_norm or a.cosine_loss):
        ap.error("block variants and --cosine-loss exist only in --family lightning")
    if a.family == "ddpm" and a.timestep_sampling != "uniform":
        ap.error("--timestep-sampling logit_normal with ddpm: no reference maps a continuous t "
                 "to a DDPM index")
    if a.batch < 2 or a.input_size % a.patch_size or a.hidden_size % a.num_heads:
        ap.error("need --batch >= 2, input a multiple of patch, hidden a multiple of heads")
    if a.pos_embed == "rope" and (a.hidden_size // a.num_heads) % 4:
        ap.error("rope needs head_dim % 4 == 0 (LightningDiT rotates head_dim/2 per axis in pairs)")
    return a


# ---------------------------------------------------------------------------------------------
# References
# ---------------------------------------------------------------------------------------------

class Refs:
    """The reference modules, imported once."""

    def __init__(self, a):
        rs.install()
        self.a = a
        if a.family == "lightning":
            m = rs.import_repo(a.lightningdit, ["models.lightningdit", "transport"])
            self.model_mod, self.transport = m["models.lightningdit"], m["transport"]
        if a.family in ("lightning", "sit"):
            s = rs.import_repo(a.sit, ["models", "transport"])
            self.sit_models, self.sit_transport = s["models"], s["transport"]
            if a.family == "sit":
                self.model_mod, self.transport = s["models"], s["transport"]
        if a.family == "ddpm":
            d = rs.import_repo(a.dit, ["models", "diffusion"])
            self.model_mod, self.diffusion = d["models"], d["diffusion"]
            g = rs.import_repo(a.minsnr, ["guided_diffusion.gaussian_diffusion"])
            self.minsnr = g["guided_diffusion.gaussian_diffusion"]

    def model(self):
        a, m = self.a, self.model_mod
        kw = dict(input_size=a.input_size, patch_size=a.patch_size, in_channels=a.in_channels,
                  hidden_size=a.hidden_size, depth=a.depth, num_heads=a.num_heads,
                  mlp_ratio=a.mlp_ratio, class_dropout_prob=a.class_dropout_prob,
                  num_classes=a.num_classes)
        if a.family == "lightning":
            net = m.LightningDiT(**kw, learn_sigma=False, use_qknorm=a.qk_norm,
                                 use_swiglu=a.mlp == "swiglu", use_rope=a.pos_embed == "rope",
                                 use_rmsnorm=a.norm == "rmsnorm", wo_shift=False,
                                 use_checkpoint=False)
            for mod in net.modules():
                if isinstance(mod, m.Attention):
                    mod.fused_attn = False   # its explicit path; F.sdpa is not in 1.13
        elif a.family == "sit":
            net = m.SiT(**kw, learn_sigma=False)
        else:
            net = m.DiT(**kw, learn_sigma=True)
        return net.eval()

    def transport_obj(self, sit=False):
        a = self.a
        tr = self.sit_transport if sit else self.transport
        if a.family == "lightning" and not sit:
            return tr.create_transport("Linear", "velocity", None, None, None,
                                       use_cosine_loss=a.cosine_loss,
                                       use_lognorm=a.timestep_sampling == "logit_normal")
        return tr.create_transport("Linear", "velocity", None, None, None)


def trainable(model):
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def perturbed_model(refs, gen):
    """Reference init under the global seed, then every trainable tensor moved off it (weights +
    0.05 N(0,1), 1-D tensors + 0.02 N(0,1)), as tools/make_golden.py does."""
    model = refs.model()
    with torch.no_grad():
        for p in trainable(model).values():
            std = 0.05 if p.dim() >= 2 else 0.02
            p.add_(std * torch.randn(p.shape, generator=gen, dtype=F64))
    return model


# ---------------------------------------------------------------------------------------------
# Groups (each returns its tensors; run inside rs.Float64() for the file, outside for float32)
# ---------------------------------------------------------------------------------------------

def forward_group(model, inp):
    x = inp["x"].clone().requires_grad_(True)
    model.zero_grad(set_to_none=True)
    out = model(x, inp["t"], inp["y"])
    (out * inp["cotangent"]).sum().backward()
    g = dict(inp, out=out.detach(), dx=x.grad)
    return g, {n: p.grad.detach().clone() for n, p in trainable(model).items()}


def flow_loss_group(refs, model, inp):
    """The reference's training_losses with its (t, x0, x1) draw replaced by the given tensors;
    the training loss is mean(loss) + mean(cos_loss) as LightningDiT's train.py sums them."""
    tr = refs.transport_obj()
    t, x0, x1 = inp["t"], inp["noise"], inp["x1"]
    tr.sample = lambda x1_, *args, **kw: (t, x0, x1_)
    model.zero_grad(set_to_none=True)
    terms = tr.training_losses(model, x1, dict(y=inp["y"]))
    loss = terms["loss"] + terms["cos_loss"] if "cos_loss" in terms else terms["loss"]
    loss.mean().backward()
    _, x_t, u_t = tr.path_sampler.plan(t, x0, x1)
    g = dict(inp, loss=loss.detach(), mse=terms["loss"].detach(), x_t=x_t, target=u_t,
             pred=terms["pred"].detach())
    if "cos_loss" in terms:
        g["cos"] = terms["cos_loss"].detach()
    return g, {n: p.grad.detach().clone() for n, p in trainable(model).items()}


class _GivenNormal:
    """scipy.stats.norm whose rvs(loc, scale, size) is loc + scale * u for the given u (what
    norm.rvs computes from its standard normal draws)."""

    def __init__(self, u):
        self.u = u

    def rvs(self, loc=0.0, scale=1.0, size=None):
        assert size == len(self.u), f"logit-normal draw of {size}, given {len(self.u)}"
        return loc + scale * self.u


def timesteps_group(refs, inp):
    """LightningDiT's logit-normal sampler (norm.rvs, then 1/(1+exp(-u)), then * (t1 - t0) + t0
    from check_interval), its normal draws replaced by the given standard normals u."""
    a = refs.a
    tr = refs.transport_obj()
    mod = refs.transport.transport                # LightningDiT's transport/transport.py
    real = mod.norm
    mod.norm = _GivenNormal(inp["u"].detach().cpu().numpy().astype(np.float64))
    try:
        t_ref = tr.sample_logit_normal(a.logit_normal_mean, a.logit_normal_std, size=a.batch)
    finally:
        mod.norm = real
    t0, t1 = tr.check_interval(tr.train_eps, tr.sample_eps)
    t_ref = t_ref * (t1 - t0) + t0
    return {"u": inp["u"], "t": t_ref}, (t0, t1)


def _cfg_kwargs(refs, y2):
    a = refs.a
    kw = dict(y=y2, cfg_scale=a.cfg_scale)
    if a.family == "lightning":
        kw.update(cfg_interval=True, cfg_interval_start=a.cfg_interval_start)
    return kw


def ode_step(refs, model, inp, method, k):
    """One step k of Sampler.sample_ode (torchdiffeq fixed grid) on the cfg-doubled batch."""
    a = refs.a
    sampler = refs.transport.Sampler(refs.transport_obj())
    fn = sampler.sample_ode(sampling_method=method, num_steps=a.ode_steps)
    ode = fn.__self__
    grid = ode.t.clone()
    ode.t = grid[k:k + 2]
    N = a.batch
    x2 = torch.cat([inp["x_t"], inp["x_t"]])
    y2 = torch.cat([inp["y"], torch.full_like(inp["y"], a.num_classes)])
    kw = _cfg_kwargs(refs, y2)
    with torch.no_grad():
        out = fn(x2, model.forward_with_cfg, **kw)[-1]
        # the guided velocities the step used (the reference's drift = forward_with_cfg)
        ones = torch.ones(2 * N, dtype=x2.dtype)
        t0, dt = grid[k], grid[k + 1] - grid[k]
        k1 = sampler.drift(x2, ones * t0, model.forward_with_cfg, **kw)
        k2 = sampler.drift(x2 + dt * k1, ones * (t0 + dt), model.forward_with_cfg, **kw)
    g = {"x_t": inp["x_t"], "y": inp["y"], "t": grid[k], "t_next": grid[k + 1], "grid": grid,
         "out": out[:N]}
    if method == "euler":
        g["v"] = k1[:N]
    else:
        g["k1"], g["k2"] = k1[:N], k2[:N]
    return g


def sde_parts(refs):
    a = refs.a
    tr_mod = refs.sit_transport if a.family == "lightning" else refs.transport
    transport = refs.transport_obj(sit=a.family == "lightning")
    sampler = tr_mod.Sampler(transport)
    drift, diffusion = sampler._Sampler__get_sde_diffusion_and_drift(
        diffusion_form=a.diffusion_form, diffusion_norm=a.diffusion_norm)
    t0, t1 = transport.check_interval(transport.train_eps, transport.sample_eps,
                                      diffusion_form=a.diffusion_form, sde=True, eval=True,
                                      reverse=False, last_step_size=a.last_step_size)
    sde = tr_mod.integrators.sde(drift, diffusion, t0=t0, t1=t1, num_steps=a.sde_steps,
                                 sampler_type="Euler")
    last = sampler._Sampler__get_last_step(drift, last_step=a.last_step,
                                           last_step_size=a.last_step_size)
    return sde, last, t1


def _sde_terms(sde, x2, t, model, kw):
    """The reference's SDE drift (v + D score, cfg inside) and diffusion D(t) at (x2, t)."""
    ts = torch.ones(x2.shape[0], dtype=x2.dtype) * t
    drift = sde.drift(x2, ts, model.forward_with_cfg, **kw)
    diffusion = torch.as_tensor(sde.diffusion(x2, ts), dtype=x2.dtype)
    return drift, diffusion.expand(x2.shape[0], *([1] * (x2.dim() - 1))).reshape(-1)


def sde_step(refs, model, inp, k):
    """Step k of SiT's Euler-Maruyama loop (sde._sde__Euler_Maruyama_step) on the doubled batch
    with the given Wiener draw, and the last step ("Mean") at t1 = 1 - last_step_size."""
    a = refs.a
    sde, last, t1 = sde_parts(refs)
    N = a.batch
    x2 = torch.cat([inp["x_t"], inp["x_t"]])
    y2 = torch.cat([inp["y"], torch.full_like(inp["y"], a.num_classes)])
    noise2 = torch.cat([inp["noise"], inp["noise_null_half"]]).to(x2.dtype)
    kw = _cfg_kwargs(refs, y2)
    with torch.no_grad(), rs.given_randn(noise2):
        x_next, mean_x = sde._sde__Euler_Maruyama_step(x2, x2, sde.t[k], model.forward_with_cfg,
                                                        **kw)
    with torch.no_grad():
        ts = torch.ones(2 * N, dtype=x2.dtype) * t1
        x_last = last(x2, ts, model.forward_with_cfg, **kw)
        d_em, diff_em = _sde_terms(sde, x2, sde.t[k], model, kw)
        d_last, diff_last = _sde_terms(sde, x2, t1, model, kw)
    em = {"x_t": inp["x_t"], "y": inp["y"], "t": sde.t[k], "t_next": sde.t[k] + sde.dt,
          "grid": sde.t.clone(), "noise": inp["noise"], "out": x_next[:N], "mean": mean_x[:N],
          "drift": d_em[:N], "diffusion": diff_em[:N]}
    lst = {"x_t": inp["x_t"], "y": inp["y"], "t": torch.as_tensor(float(t1), dtype=x2.dtype),
           "t_next": torch.as_tensor(1.0, dtype=x2.dtype), "out": x_last[:N],
           "drift": d_last[:N], "diffusion": diff_last[:N]}
    return em, lst


def cfg_group(refs, model, inp):
    a = refs.a
    N = a.batch
    x2 = torch.cat([inp["x_t"], inp["x_t"]])
    y2 = torch.cat([inp["y"], torch.full_like(inp["y"], a.num_classes)])
    t2 = torch.full((2 * N,), float(inp["t"]), dtype=x2.dtype)
    with torch.no_grad():
        out = model.forward_with_cfg(x2, t2, **_cfg_kwargs(refs, y2))
    return {"x": x2, "t": t2, "y": y2, "out": out}


# ---------------------------------------------------------------------------------------------
# Inputs (drawn once in float64 from the generator)
# ---------------------------------------------------------------------------------------------

def draw_inputs(a, gen):
    N, C, H = a.batch, a.in_channels, a.input_size

    def randn(*s):
        return torch.randn(*s, generator=gen, dtype=F64)

    y_fwd = torch.randint(0, a.num_classes, (N,), generator=gen)
    y_fwd[-1] = a.num_classes
    fwd = {"x": randn(N, C, H, H), "t": 0.05 + 0.9 * torch.rand(N, generator=gen, dtype=F64),
           "y": y_fwd}
    fwd["cotangent"] = randn(N, C, H, H)
    loss_t = torch.rand(N, generator=gen, dtype=F64)
    loss_t[0], loss_t[1] = 0.03, 0.97            # both ends of the path
    loss = {"x1": 0.7 * randn(N, C, H, H), "noise": randn(N, C, H, H), "t": loss_t,
            "y": torch.randint(0, a.num_classes, (N,), generator=gen)}
    seed = int(torch.randint(0, 2 ** 31 - 1, (1,), generator=gen))
    u = torch.from_numpy(np.random.RandomState(seed).standard_normal(N))
    samp = {"x_t": randn(N, C, H, H), "y": torch.randint(0, a.num_classes, (N,), generator=gen),
            "noise": randn(N, C, H, H), "noise_null_half": randn(N, C, H, H)}
    return fwd, loss, {"u": u, "seed": seed}, samp


def ode_step_indices(a):
    """euler: a step inside the guidance interval; heun: the step whose first evaluation is
    before cfg_interval_start and second after it (lightning), else a middle step."""
    grid = np.linspace(0.0, 1.0, a.ode_steps)
    if a.family == "lightning":
        k_heun = int(np.searchsorted(grid, a.cfg_interval_start) - 1)
        k_euler = min(k_heun + 2, a.ode_steps - 2)
    else:
        k_heun, k_euler = a.ode_steps // 2, a.ode_steps // 3
    return k_euler, max(k_heun, 0)


# ---------------------------------------------------------------------------------------------
# The whole file's numbers
# ---------------------------------------------------------------------------------------------

def zero_by_symmetry(grads):
    """Names whose float64 gradient is roundoff only (< 1e-13 of the largest gradient): the
    k-norm LayerNorm bias without RoPE (q.b is the same for every key, softmax ignores it).
    Their exact value is 0; the file stores 0 and marks the dataset (attr zero_by_symmetry)."""
    top = max(float(g.abs().max()) for g in grads.values())
    return sorted(n for n, g in grads.items() if float(g.abs().max()) < 1e-13 * top)


def compute_flow(refs, model, draws):
    """Every group of a flow file, in the current dtype mode."""
    a = refs.a
    fwd_in, loss_in, ts_in, smp_in = draws
    out = {}
    out["forward"], out["forward/grads"] = forward_group(model, fwd_in)
    out["loss"], out["loss/grads"] = flow_loss_group(refs, model, loss_in)
    if a.timestep_sampling == "logit_normal":
        out["timesteps"], _ = timesteps_group(refs, ts_in)
    k_euler, k_heun = ode_step_indices(a)
    out["sample/euler"] = ode_step(refs, model, smp_in, "euler", k_euler)
    out["sample/heun"] = ode_step(refs, model, smp_in, "heun2", k_heun)
    k_sde = a.sde_steps // 2
    out["sample/euler_maruyama"], out["sample/euler_maruyama_last"] = \
        sde_step(refs, model, smp_in, k_sde)
    out["sample/cfg"] = cfg_group(refs, model, dict(smp_in, t=out["sample/euler"]["t"]))
    out["_steps"] = {"euler": k_euler, "heun": k_heun, "euler_maruyama": k_sde}
    zeros = sorted(set(zero_by_symmetry(out["forward/grads"])) |
                   set(zero_by_symmetry(out["loss/grads"])))
    for g in ("forward/grads", "loss/grads"):
        for n in zeros:
            out[g][n] = torch.zeros_like(out[g][n])
    out["_zero"] = zeros
    return out


def cast_inputs(draws, dtype):
    def cast(d):
        return {k: (v.to(dtype) if torch.is_tensor(v) and v.is_floating_point() else v)
                for k, v in d.items()}
    return tuple(cast(d) for d in draws)


def finite_difference_check(refs, model, draws, grads, compute_loss, picks):
    """Central differences of mean(loss) in float64 against autograd on a few entries."""
    rows = []
    params = trainable(model)
    for name, idx in picks:
        p = params[name]
        h = 1e-4 * max(1.0, abs(float(p.detach()[idx])))
        vals = []
        for s in (+1, -1):
            with torch.no_grad():
                p[idx] += s * h
            vals.append(compute_loss())
            with torch.no_grad():
                p[idx] -= s * h
        fd = (vals[0] - vals[1]) / (2 * h)
        ad = float(grads[name][idx])
        rows.append((f"{name}{list(idx)}", ad, fd, abs(ad - fd) / max(abs(ad), 1e-30)))
    return rows


def fd_picks(model, grads):
    names = list(trainable(model))
    wanted = [n for n in names if any(s in n for s in
              ("mlp.w12.weight", "mlp.fc1.weight", "attn.q_norm.weight", "norm1.weight",
               "attn.qkv.weight", "final_layer.linear.bias", "t_embedder.mlp.0.weight"))]
    picks = []
    for n in wanted[:6]:
        g = grads[n]
        flat = int(g.abs().argmax())          # the largest entry: FD roundoff stays negligible
        picks.append((n, tuple(int(i) for i in np.unravel_index(flat, tuple(g.shape)))))
    return picks


def write_config(f, a, model, extra):
    c = f.create_group("config").attrs
    ints = dict(input_size=a.input_size, patch_size=a.patch_size, in_channels=a.in_channels,
                hidden_size=a.hidden_size, depth=a.depth, num_heads=a.num_heads,
                num_classes=a.num_classes, out_channels=model.out_channels,
                num_patches=model.x_embedder.num_patches, frequency_embedding_size=256)
    for k, v in ints.items():
        c[k] = np.int64(v)
    c["mlp_ratio"] = np.float64(a.mlp_ratio)
    c["class_dropout_prob"] = np.float64(a.class_dropout_prob)
    c["layernorm_eps"] = np.float64(1e-6)
    c["learn_sigma"] = np.bool_(model.learn_sigma)
    for k, v in extra.items():
        if isinstance(v, bool):
            c[k] = np.int64(v)
        elif isinstance(v, int):
            c[k] = np.int64(v)
        elif isinstance(v, float):
            c[k] = np.float64(v)
        else:
            c[k] = v


def mlp_width(model):
    mlp = model.blocks[0].mlp
    return mlp.w3.in_features if hasattr(mlp, "w3") else mlp.fc1.out_features


def flow_config(a, tr, model):
    return dict(
        model_family={"lightning": "LightningDiT", "sit": "SiT"}[a.family],
        objective="flow", path_type="Linear", prediction="velocity",
        train_eps=float(tr.train_eps), sample_eps=float(tr.sample_eps),
        timestep_sampling=a.timestep_sampling,
        logit_normal_mean=float(a.logit_normal_mean), logit_normal_std=float(a.logit_normal_std),
        cosine_loss=bool(a.cosine_loss), loss_weight="none", min_snr_gamma=float(a.min_snr_gamma),
        mlp=a.mlp, norm=a.norm, pos_embed=a.pos_embed, qk_norm=bool(a.qk_norm),
        mlp_hidden=int(mlp_width(model)),
        rmsnorm_eps=1e-6, qk_norm_eps=(1e-6 if a.norm == "rmsnorm" else 1e-5),
        rope_theta=10000.0, cosine_eps=1e-8)


def sample_attrs(a, name, steps):
    at = {"cfg_scale": float(a.cfg_scale), "null_label": int(a.num_classes),
          "guided_channels": int(min(3, a.in_channels)),
          "cfg_interval_start": float(a.cfg_interval_start if a.family == "lightning" else 0.0)}
    if name in ("euler", "heun"):
        at.update(method={"euler": "euler", "heun": "heun2"}[name], num_steps=a.ode_steps,
                  step=steps[name], timestep_shift=0.0)
    else:
        at.update(diffusion_form=a.diffusion_form, diffusion_norm=float(a.diffusion_norm),
                  last_step=a.last_step, last_step_size=float(a.last_step_size),
                  num_steps=a.sde_steps)
        if name == "euler_maruyama":
            at["step"] = steps[name]
    return at


def set_attrs(grp, at):
    for k, v in at.items():
        grp.attrs[k] = (np.int64(v) if isinstance(v, (bool, int)) else
                        np.float64(v) if isinstance(v, float) else v)


def write_flow_file(a, model, weights, res, after, ema, tr, command):
    with h5py.File(a.out, "w") as f:
        write_config(f, a, model, flow_config(a, tr, model))
        f["config"].attrs["source"] = command
        f.attrs.create("trainable", np.array(list(trainable(model)), dtype=object),
                       dtype=h5py.string_dtype())
        write_group(f, "weights", weights)
        for g in ("forward", "forward/grads", "loss", "loss/grads"):
            grp = write_group(f, g, res[g])
            if g.endswith("grads"):
                for n in res["_zero"]:
                    grp[n].attrs["zero_by_symmetry"] = np.int64(1)
        if "timesteps" in res:
            g = write_group(f, "timesteps", res["timesteps"])
            set_attrs(g, {"mean": float(a.logit_normal_mean), "std": float(a.logit_normal_std),
                          "t0": 0.0, "t1": 1.0})
        for name in ("euler", "heun", "euler_maruyama", "euler_maruyama_last"):
            g = write_group(f, f"sample/{name}", res[f"sample/{name}"])
            set_attrs(g, sample_attrs(a, name, res["_steps"]))
        g = write_group(f, "sample/cfg", res["sample/cfg"])
        set_attrs(g, {"scale": float(a.cfg_scale), "guided_channels": int(min(3, a.in_channels)),
                      "cfg_interval_start": float(a.cfg_interval_start
                                                  if a.family == "lightning" else 0.0)})
        write_group(f, "adamw/params_after", after)
        for k in ("lr", "beta1", "beta2", "eps", "weight_decay"):
            f["adamw"].attrs[k] = np.float64(getattr(a, k))
        write_group(f, "ema/after", ema)
        f["ema"].attrs["decay"] = np.float64(a.ema_decay)


def compare_results(ref, got, prefix=""):
    rows = []
    for g, d in ref.items():
        if g.startswith("_"):
            continue
        for k, v in d.items():
            if torch.is_tensor(v) and v.is_floating_point() and k in got[g]:
                rows.append((f"{g}/{k}", rs.rel_l2(got[g][k], v)))
    return rows


def command_line():
    return "/usr/bin/python3 " + " ".join(shlex.quote(x) for x in sys.argv)


def repo_commit(path):
    try:
        return subprocess.run(["git", "-C", path, "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except Exception:  # noqa: BLE001  (a checkout without git: say so in the file)
        return "unknown"


def provenance(a):
    repos = {"lightning": ["lightningdit", "sit"], "sit": ["sit"], "ddpm": ["dit", "minsnr"]}
    return "; ".join(f"{k} {os.path.abspath(getattr(a, k))} @ {repo_commit(getattr(a, k))}"
                     for k in repos[a.family])


def main_flow(a, refs):
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(a.seed)
    with rs.Float64():
        torch.manual_seed(a.seed)                 # the reference init draws from the global RNG
        model = perturbed_model(refs, gen)
        weights = {n: v.detach().clone() for n, v in model.state_dict().items()}
        draws = draw_inputs(a, gen)
        res = compute_flow(refs, model, draws)
        after, ema = adamw_ema(model, a, weights, res["loss/grads"])
        tr = refs.transport_obj()
    cmd = f"{command_line()} [{provenance(a)}] float64"
    write_flow_file(a, model, weights, res, after, ema, tr, cmd)
    print(f"wrote {a.out} ({os.path.getsize(a.out) / 1e3:.0f} KB)")
    if a.no_self_check:
        return 0
    return self_check_flow(a, refs, model, weights, draws, res)


def self_check_flow(a, refs, model64, weights, draws, res):
    """Stock float32 reference vs the float64 file, and finite differences in float64."""
    m32 = refs.model()
    m32.load_state_dict({k: v.float() for k, v in weights.items()}, strict=True)
    res32 = compute_flow(refs, m32, cast_inputs(draws, torch.float32))
    rows = compare_results(res, res32)
    zero = {f"{g}/{n}" for g in ("forward/grads", "loss/grads") for n in res["_zero"]}
    for name in zero:                     # exact zeros: absolute error of the float32 run
        print(f"  zero by symmetry: {name} (file 0, float32 run |g| = "
              f"{float(res32[name.rsplit('/', 1)[0]][name.rsplit('/', 1)[1]].abs().max()):.1e})")
    rows = [r for r in rows if r[0] not in zero]
    ok = True
    for name, err in rows:
        flag = err >= 1e-5
        ok &= not flag
        if flag or "grads" not in name:
            print(f"  f32 vs f64 {err:9.2e}  {name}{'   <-- FAIL' if flag else ''}")
    worst = max(rows, key=lambda r: r[1])
    print(f"  float32 reference vs float64: {len(rows)} tensors, worst {worst[1]:.2e} ({worst[0]})")

    def loss_value():
        with rs.Float64():
            g, _ = flow_loss_group(refs, model64, draws[1])
        return float(g["loss"].mean())

    with rs.Float64():
        fd = finite_difference_check(refs, model64, draws, res["loss/grads"], loss_value,
                                     fd_picks(model64, res["loss/grads"]))
    for name, ad, fdv, err in fd:
        flag = err > 1e-6
        ok &= not flag
        print(f"  finite diff {err:9.2e}  {name}: autograd {ad:+.10e} fd {fdv:+.10e}"
              f"{'   <-- FAIL' if flag else ''}")
    with rs.Float64():
        for name, err in mirror_checks(a, model64, res):
            flag = err > 1e-12
            ok &= not flag
            print(f"  formula    {err:9.2e}  {name}{'   <-- FAIL' if flag else ''}")
    print("SELF-CHECK OK" if ok else "SELF-CHECK FAILED")
    return 0 if ok else 1


def guided_velocity(a, model, x, t):
    """The documented cfg convention: cond and null-label passes; guidance on the first
    min(3, C) channels, only where t >= cfg_interval_start (lightning); other channels cond."""
    N = x.shape[0]
    y = x.new_zeros(N, dtype=torch.int64)
    return lambda yc: _guided(a, model, x, t, yc)


def _guided(a, model, x, t, yc):
    tt = torch.full((x.shape[0],), float(t), dtype=x.dtype)
    vc = model(x, tt, yc)
    vu = model(x, tt, torch.full_like(yc, a.num_classes))
    g = min(3, a.in_channels)
    start = a.cfg_interval_start if a.family == "lightning" else 0.0
    v = vc.clone()
    if float(t) >= start:
        v[:, :g] = vu[:, :g] + a.cfg_scale * (vc[:, :g] - vu[:, :g])
    return v


def mirror_checks(a, model, res):
    """Independent float64 formulas of the SCHEMA against the reference's numbers."""
    rows = []
    with torch.no_grad():
        if "timesteps" in res:
            u = res["timesteps"]["u"]
            t = torch.sigmoid(a.logit_normal_mean + a.logit_normal_std * u)
            rows.append(("timesteps/t = sigmoid(mean + std u)", rs.rel_l2(t, res["timesteps"]["t"])))
        g = res["sample/euler"]
        x, y, t, tn = g["x_t"], g["y"], g["t"], g["t_next"]
        v = _guided(a, model, x, t, y)
        rows.append(("sample/euler/v = guided velocity", rs.rel_l2(v, g["v"])))
        out = x + (tn - t) * v
        rows.append(("sample/euler/out = x + dt v(x,t)", rs.rel_l2(out, g["out"])))
        g = res["sample/heun"]
        x, y, t, tn = g["x_t"], g["y"], g["t"], g["t_next"]
        k1 = _guided(a, model, x, t, y)
        k2 = _guided(a, model, x + (tn - t) * k1, tn, y)
        out = x + (tn - t) * 0.5 * (k1 + k2)
        rows.append(("sample/heun/k1, k2 (k1 unguided, k2 guided)",
                     max(rs.rel_l2(k1, g["k1"]), rs.rel_l2(k2, g["k2"]))))
        rows.append(("sample/heun/out = x + dt/2 (k1 + k2)", rs.rel_l2(out, g["out"])))

        def sde_drift(x, t, y):
            v = _guided(a, model, x, t, y)
            score = (t * v - x) / (1 - t)          # Linear path: var = 1 - t
            diff = {"sigma": a.diffusion_norm * (1 - t), "constant": a.diffusion_norm,
                    "linear": a.diffusion_norm * (1 - t)}[a.diffusion_form]
            return v + diff * score, diff

        g = res["sample/euler_maruyama"]
        x, y, t, tn = g["x_t"], g["y"], g["t"], g["t_next"]
        d, diff = sde_drift(x, t, y)
        rows.append(("sample/euler_maruyama/drift, diffusion",
                     max(rs.rel_l2(d, g["drift"]),
                         rs.rel_l2(torch.full_like(g["diffusion"], float(diff)), g["diffusion"]))))
        mean = x + d * (tn - t)
        out = mean + torch.sqrt(2 * torch.as_tensor(diff, dtype=x.dtype)) * g["noise"] * \
            torch.sqrt(tn - t)
        rows.append(("sample/euler_maruyama/mean = x + dt (v + D score)", rs.rel_l2(mean, g["mean"])))
        rows.append(("sample/euler_maruyama/out = mean + sqrt(2D dt) w", rs.rel_l2(out, g["out"])))
        g = res["sample/euler_maruyama_last"]
        x, y, t = g["x_t"], g["y"], g["t"]
        out = x + sde_drift(x, t, y)[0] * a.last_step_size
        rows.append(("sample/euler_maruyama_last/out = x + h (v + D score)",
                     rs.rel_l2(out, g["out"])))
    return rows


# ---------------------------------------------------------------------------------------------
# DDPM with min-SNR (official DiT model and diffusion; Min-SNR's weighted training_losses)
# ---------------------------------------------------------------------------------------------

SCHEDULE_KEYS = ("betas", "alphas_cumprod", "alphas_cumprod_prev", "posterior_variance",
                 "posterior_log_variance_clipped", "posterior_mean_coef1", "posterior_mean_coef2")


def minsnr_diffusion(refs, weight_type):
    """Min-SNR's GaussianDiffusion configured as DiT's create_diffusion("") (linear betas, epsilon,
    learned range, MSE, no timestep rescale), with its mse_loss_weight_type."""
    g = refs.minsnr
    dit = refs.diffusion.create_diffusion("")
    return g.GaussianDiffusion(betas=dit.betas, model_mean_type=g.ModelMeanType.EPSILON,
                               model_var_type=g.ModelVarType.LEARNED_RANGE,
                               loss_type=g.LossType.MSE, rescale_timesteps=False,
                               mse_loss_weight_type=weight_type), dit


def draw_ddpm_inputs(a, gen):
    N, C, H = a.batch, a.in_channels, a.input_size

    def randn(*s):
        return torch.randn(*s, generator=gen, dtype=F64)

    y_fwd = torch.randint(0, a.num_classes, (N,), generator=gen)
    y_fwd[-1] = a.num_classes
    fwd = {"x": randn(N, C, H, H), "t": torch.randint(0, 1000, (N,), generator=gen).to(F64),
           "y": y_fwd, "cotangent": randn(N, 2 * C, H, H)}
    t = torch.randint(1, 1000, (N,), generator=gen)
    t[0] = 0                                    # discretized-likelihood branch
    t[1] = 999                                  # snr < gamma: weight 1
    if N > 2:
        t[2] = 3                                # snr >> gamma: weight gamma / snr
    loss = {"x_start": 0.7 * randn(N, C, H, H), "t": t,
            "y": torch.randint(0, a.num_classes, (N,), generator=gen), "noise": randn(N, C, H, H)}
    step = int(torch.randint(1, 10, (1,), generator=gen))
    smp = {"x_t": randn(N, C, H, H), "t": torch.full((N,), step, dtype=torch.int64),
           "y": torch.randint(0, a.num_classes, (N,), generator=gen),
           "ddpm_noise": randn(N, C, H, H)}
    return fwd, loss, smp


def ddpm_loss_group(refs, model, inp, weight_type):
    """Min-SNR's training_losses; unweighted (--no-min-snr), DiT's own, so such a file is the
    official code's throughout (the self-check holds Min-SNR's constant weighting equal to it)."""
    ms, dit = minsnr_diffusion(refs, weight_type)
    diff = dit if weight_type == "constant" else ms
    model.zero_grad(set_to_none=True)
    terms = diff.training_losses(model, inp["x_start"], inp["t"], dict(y=inp["y"]), inp["noise"])
    terms["loss"].mean().backward()
    raw = terms["mse_raw" if "mse_raw" in terms else "mse"].detach()
    g = dict(inp, loss=terms["loss"].detach(), mse=terms["mse"].detach(), mse_raw=raw,
             vb=terms["vb"].detach())
    w = terms["mse"].detach() / raw             # the weight the reference applied
    g["weight"] = w
    return g, {n: p.grad.detach().clone() for n, p in trainable(model).items()}


def ddpm_sample_group(refs, model, inp):
    a = refs.a
    diff = refs.diffusion.create_diffusion(a.respacing)
    x, t, y = inp["x_t"], inp["t"], inp["y"]
    with torch.no_grad():
        with rs.given_randn(inp["ddpm_noise"].to(x.dtype)):
            ddpm = diff.p_sample(model, x, t, clip_denoised=False, model_kwargs=dict(y=y))
        ddim = diff.ddim_sample(model, x, t, clip_denoised=False, model_kwargs=dict(y=y), eta=0.0)
        cx = torch.cat([x, x])
        ct = torch.cat([t, t]).to(x.dtype)
        cy = torch.cat([y, torch.full_like(y, a.num_classes)])
        cout = model.forward_with_cfg(cx, ct, cy, a.cfg_scale)
    smp = {"timestep_map": torch.tensor(diff.timestep_map, dtype=torch.int64),
           "betas": torch.from_numpy(np.asarray(diff.betas, dtype=np.float64)), "x_t": x, "y": y,
           "t": t, "ddpm_noise": inp["ddpm_noise"], "ddpm_out": ddpm["sample"],
           "pred_xstart": ddpm["pred_xstart"], "ddim_out": ddim["sample"]}
    return smp, {"x": cx, "t": ct, "y": cy, "out": cout}


def compute_ddpm(refs, model, draws, weight_type):
    fwd_in, loss_in, smp_in = draws
    out = {}
    out["forward"], out["forward/grads"] = forward_group(model, fwd_in)
    out["loss"], out["loss/grads"] = ddpm_loss_group(refs, model, loss_in, weight_type)
    out["sample"], out["sample/cfg"] = ddpm_sample_group(refs, model, smp_in)
    return out


def ddpm_config(a):
    return dict(model_family="DiT", objective="ddpm", timestep_sampling="uniform",
                logit_normal_mean=0.0, logit_normal_std=1.0, cosine_loss=False,
                loss_weight="none" if a.no_min_snr else "min_snr",
                min_snr_gamma=float(a.min_snr_gamma), mlp="gelu", norm="layernorm",
                pos_embed="sincos", qk_norm=False, mlp_hidden=int(a.hidden_size * a.mlp_ratio))


def main_ddpm(a, refs):
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(a.seed)
    wtype = "constant" if a.no_min_snr else f"min_snr_{a.min_snr_gamma}"
    with rs.Float64(round_float=True):
        torch.manual_seed(a.seed)
        model = perturbed_model(refs, gen)
        weights = {n: v.detach().clone() for n, v in model.state_dict().items()}
        draws = draw_ddpm_inputs(a, gen)
        res = compute_ddpm(refs, model, draws, wtype)
        after, ema = adamw_ema(model, a, weights, res["loss/grads"])
        _, dit = minsnr_diffusion(refs, wtype)
        schedule = {k: torch.from_numpy(np.asarray(getattr(dit, k), dtype=np.float64))
                    for k in SCHEDULE_KEYS}
    cmd = f"{command_line()} [{provenance(a)}] float64"
    with h5py.File(a.out, "w") as f:
        write_config(f, a, model, ddpm_config(a))
        f["config"].attrs["source"] = cmd
        f.attrs.create("trainable", np.array(list(trainable(model)), dtype=object),
                       dtype=h5py.string_dtype())
        write_group(f, "weights", weights)
        for g in ("forward", "forward/grads", "loss", "loss/grads"):
            drop = ("weight", "mse_raw") if g == "loss" and a.no_min_snr else ()  # the DiT schema
            write_group(f, g, {k: v for k, v in res[g].items() if k not in drop})
        write_group(f, "schedule", schedule)
        g = write_group(f, "sample", res["sample"])
        g.attrs["respacing"] = a.respacing
        g = write_group(f, "sample/cfg", res["sample/cfg"])
        g.attrs["scale"] = np.float64(a.cfg_scale)
        g.attrs["guided_channels"] = np.int64(min(3, a.in_channels))
        write_group(f, "adamw/params_after", after)
        for k in ("lr", "beta1", "beta2", "eps", "weight_decay"):
            f["adamw"].attrs[k] = np.float64(getattr(a, k))
        write_group(f, "ema/after", ema)
        f["ema"].attrs["decay"] = np.float64(a.ema_decay)
    print(f"wrote {a.out} ({os.path.getsize(a.out) / 1e3:.0f} KB)")
    if a.no_self_check:
        return 0
    return self_check_ddpm(a, refs, model, weights, draws, res, wtype, dit)


def self_check_ddpm(a, refs, model64, weights, draws, res, wtype, dit):
    ok = True
    m32 = refs.model()
    m32.load_state_dict({k: v.float() for k, v in weights.items()}, strict=True)
    res32 = compute_ddpm(refs, m32, cast_inputs(draws, torch.float32), wtype)
    rows = compare_results(res, res32)
    for name, err in rows:
        flag = err >= 1e-5
        ok &= not flag
        if flag or "grads" not in name:
            print(f"  f32 vs f64 {err:9.2e}  {name}{'   <-- FAIL' if flag else ''}")
    worst = max(rows, key=lambda r: r[1])
    print(f"  float32 reference vs float64: {len(rows)} tensors, worst {worst[1]:.2e} ({worst[0]})")
    with rs.Float64(round_float=True):
        # With constant weighting the Min-SNR class must equal DiT's own training_losses.
        x0, t, y, noise = (draws[1][k] for k in ("x_start", "t", "y", "noise"))
        with torch.no_grad():
            ours = minsnr_diffusion(refs, "constant")[0].training_losses(model64, x0, t,
                                                                        dict(y=y), noise)
            official = dit.training_losses(model64, x0, t, dict(y=y), noise)
        for k in ("mse", "vb", "loss"):
            err = rs.rel_l2(ours[k], official[k])
            ok &= err <= 1e-14
            print(f"  Min-SNR constant vs DiT {k}: {err:.2e}")
        err = rs.rel_l2(ours["mse"], res["loss"]["mse_raw"])
        ok &= err <= 1e-14
        print(f"  DiT mse vs file mse_raw: {err:.2e}")
        # the reference: snr = (alpha / sigma)^2 of the extracted (float32-rounded) coefficients
        alpha = torch.from_numpy(dit.sqrt_alphas_cumprod)[t].to(torch.float32).to(F64)
        sigma = torch.from_numpy(dit.sqrt_one_minus_alphas_cumprod)[t].to(torch.float32).to(F64)
        snr = (alpha / sigma) ** 2
        w = torch.minimum(snr, torch.full_like(snr, a.min_snr_gamma)) / snr
        if a.no_min_snr:
            w = torch.ones_like(w)
        err = rs.rel_l2(w, res["loss"]["weight"])
        ok &= err <= 1e-14
        print(f"  weight = min(snr, gamma)/snr: {err:.2e}  (weights {res['loss']['weight'].tolist()})")
        err = rs.rel_l2(res["loss"]["mse"] + res["loss"]["vb"], res["loss"]["loss"])
        ok &= err <= 1e-15
        print(f"  loss = weight * mse_raw + vb: {err:.2e}")

        # vb sees the model's mean detached (the reference's frozen_out), so mean(loss)'s
        # autograd gradient is not the derivative of its value: check the weighted mse part.
        ms = minsnr_diffusion(refs, wtype)[0]

        def mse_terms():
            return ms.training_losses(model64, x0, t, dict(y=y), noise)["mse"].mean()

        model64.zero_grad(set_to_none=True)
        mse_terms().backward()
        g_mse = {n: p.grad.detach().clone() for n, p in trainable(model64).items()}
        with torch.no_grad():
            fd = finite_difference_check(refs, model64, draws, g_mse,
                                         lambda: float(mse_terms()), fd_picks(model64, g_mse))
    for name, ad, fdv, err in fd:
        flag = err > 1e-6
        ok &= not flag
        print(f"  finite diff {err:9.2e}  {name}: autograd {ad:+.10e} fd {fdv:+.10e}"
              f"{'   <-- FAIL' if flag else ''}")
    print("SELF-CHECK OK" if ok else "SELF-CHECK FAILED")
    return 0 if ok else 1


# ---------------------------------------------------------------------------------------------
# --verify FILE: recompute a flow file from its own weights and inputs with the reference code
# ---------------------------------------------------------------------------------------------

def _s(v):
    return v.decode() if isinstance(v, bytes) else v


def args_from_file(f, base):
    """The generator's arguments that reproduce the file's config and sampler attrs."""
    c = f["config"].attrs
    fam = {"LightningDiT": "lightning", "SiT": "sit"}[_s(c["model_family"])]
    e, em = f["sample/euler"].attrs, f["sample/euler_maruyama"].attrs
    argv = ["--family", fam, "--out", "-",
            "--input-size", str(c["input_size"]), "--patch-size", str(c["patch_size"]),
            "--in-channels", str(c["in_channels"]), "--hidden-size", str(c["hidden_size"]),
            "--depth", str(c["depth"]), "--num-heads", str(c["num_heads"]),
            "--mlp-ratio", repr(float(c["mlp_ratio"])), "--num-classes", str(c["num_classes"]),
            "--class-dropout-prob", repr(float(c["class_dropout_prob"])),
            "--batch", str(f["forward/x"].shape[0]), "--mlp", _s(c["mlp"]),
            "--norm", _s(c["norm"]), "--pos-embed", _s(c["pos_embed"]),
            "--timestep-sampling", _s(c["timestep_sampling"]),
            "--logit-normal-mean", repr(float(c["logit_normal_mean"])),
            "--logit-normal-std", repr(float(c["logit_normal_std"])),
            "--cfg-scale", repr(float(e["cfg_scale"])),
            "--cfg-interval-start", repr(float(e["cfg_interval_start"])),
            "--ode-steps", str(e["num_steps"]), "--sde-steps", str(em["num_steps"]),
            "--diffusion-form", _s(em["diffusion_form"]),
            "--diffusion-norm", repr(float(em["diffusion_norm"])),
            "--last-step", _s(em["last_step"]),
            "--last-step-size", repr(float(em["last_step_size"])),
            "--ema-decay", repr(float(f["ema"].attrs["decay"]))]
    for k in ("lr", "beta1", "beta2", "eps", "weight_decay"):
        argv += [f"--{k.replace('_', '-')}", repr(float(f["adamw"].attrs[k]))]
    argv += ["--qk-norm"] if int(c["qk_norm"]) else []
    argv += ["--cosine-loss"] if int(c["cosine_loss"]) else []
    argv += [f"--{k}={getattr(base, k)}" for k in ("lightningdit", "sit") if getattr(base, k)]
    return parse_args(argv)


def verify_flow(path, base, tol):
    """Every dataset of a flow file against the reference recomputed from the file's /weights
    and inputs in float64 (relative L2 <= tol; exact zeros by absolute error)."""
    torch.set_num_threads(1)
    with h5py.File(path, "r") as f:
        a = args_from_file(f, base)
        refs = Refs(a)

        def rd(name):
            return torch.from_numpy(np.asarray(f[name][()]))

        with rs.Float64():
            model = refs.model()
            sd = model.state_dict()
            problems = []
            if set(f["weights"]) != set(sd):
                problems.append(f"/weights names differ: {sorted(set(f['weights']) ^ set(sd))}")
            rebuilt = {k: v.clone() for k, v in sd.items()}   # pos_embed, RoPE from the code
            model.load_state_dict({k: rd(f"weights/{k}") for k in sd}, strict=True)
            names = [_s(n) for n in f.attrs["trainable"]]
            if names != list(trainable(model)):
                problems.append("/ attr trainable differs from named_parameters")
            fwd = {k: rd(f"forward/{k}") for k in ("x", "t", "y", "cotangent")}
            loss = {k: rd(f"loss/{k}") for k in ("x1", "noise", "t", "y")}
            ts = {"u": rd("timesteps/u")} if "timesteps" in f else {"u": torch.zeros(a.batch)}
            smp = {k: rd(f"sample/euler/{k}") for k in ("x_t", "y")}
            smp["noise"] = rd("sample/euler_maruyama/noise")
            smp["noise_null_half"] = torch.zeros_like(smp["noise"])
            res = compute_flow(refs, model, (fwd, loss, ts, smp))
            weights = {k: rd(f"weights/{k}") for k in sd}
            res["adamw/params_after"], res["ema/after"] = adamw_ema(model, a, weights,
                                                                   res["loss/grads"])
        for k in ("pos_embed", "feat_rope.freqs_cos", "feat_rope.freqs_sin"):
            if k in rebuilt:
                res.setdefault("weights", {})[k] = rebuilt[k]
        for name, st in res["_steps"].items():
            if int(f[f"sample/{name}"].attrs["step"]) != st:
                problems.append(f"/sample/{name} attr step {f[f'sample/{name}'].attrs['step']} "
                                f"!= {st}")
        rows, covered = [], set()
        for g, d in res.items():
            if g.startswith("_"):
                continue
            for k, v in d.items():
                name = f"{g}/{k}"
                if name not in f:
                    continue
                covered.add(name)
                ref = rd(name)
                if tuple(ref.shape) != tuple(torch.as_tensor(v).shape):
                    problems.append(f"{name}: shape {tuple(ref.shape)} != {tuple(v.shape)}")
                    continue
                zero = float(ref.double().norm()) == 0.0
                err = float((torch.as_tensor(v).double() - ref.double()).norm()) / \
                    (1.0 if zero else float(ref.double().norm()))
                rows.append((name, err))
        covered |= {f"weights/{k}" for k in sd}
        every = []
        f.visititems(lambda n, o: every.append(n) if isinstance(o, h5py.Dataset) else None)
        problems += [f"{n}: dataset not checked" for n in sorted(set(every) - covered)]
    bad = [r for r in rows if r[1] > tol]
    for n, e in bad:
        print(f"  {e:9.2e}  {n}   <-- FAIL")
    for p in problems:
        print(f"PROBLEM: {p}")
    worst = max(rows, key=lambda r: r[1])
    print(f"{path}: {len(rows)} tensors recomputed by the reference, worst {worst[1]:.2e} "
          f"({worst[0]})")
    ok = not bad and not problems
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if "--verify" in argv:
        return main_verify(argv)
    a = parse_args(argv)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    refs = Refs(a)
    if a.family == "ddpm":
        return main_ddpm(a, refs)
    return main_flow(a, refs)


def main_verify(argv):
    ap = argparse.ArgumentParser(description="recompute a flow golden file with the reference")
    ap.add_argument("--verify", nargs="+", required=True, metavar="FILE")
    ap.add_argument("--lightningdit")
    ap.add_argument("--sit", required=True)
    ap.add_argument("--tol", type=float, default=1e-12)
    b = ap.parse_args(argv)
    return max(verify_flow(p, b, b.tol) for p in b.verify)


if __name__ == "__main__":
    sys.exit(main())

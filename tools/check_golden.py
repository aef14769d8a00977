"""Recompute every tensor of a golden DiT file with tools/torch_dit.py and compare.

Usage: /usr/bin/python3 tools/check_golden.py FILE [--tol 1e-12]
Prints the relative L2 error ||a - b|| / ||b|| of each tensor, fails on any error above --tol, on
any dataset of the file that no check covered, and on schema violations (dtypes, attributes).
"""

import argparse
import os
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_dit  # noqa: E402

INT_DATASETS = {"forward/y", "loss/t", "loss/y", "sample/t", "sample/y", "sample/cfg/y",
                "sample/timestep_map", "distill/t", "distill/student_layers",
                "distill/teacher_layers"}  # min-SNR files add loss/weight, loss/mse_raw (float64)
CONFIG_INT = ["input_size", "patch_size", "in_channels", "hidden_size", "depth", "num_heads",
              "num_classes", "out_channels", "num_patches", "frequency_embedding_size"]
CONFIG_FLOAT = ["mlp_ratio", "class_dropout_prob", "layernorm_eps"]


class Checker:
    """Collects per-tensor errors and the names of the datasets compared."""

    def __init__(self, f, tol):
        self.f, self.tol = f, tol
        self.rows, self.covered, self.problems = [], set(), []

    def ref(self, name):
        self.covered.add(name)
        return torch.from_numpy(np.asarray(self.f[name][()]))

    def compare(self, name, got, label=None):
        ref = self.ref(name).to(torch.float64)
        got = torch.as_tensor(got).detach().to(torch.float64)
        if tuple(got.shape) != tuple(ref.shape):
            self.problems.append(f"{name}: shape {tuple(got.shape)} != file {tuple(ref.shape)}")
            return
        norm = ref.norm().item()
        err = (got - ref).norm().item() / (norm if norm > 0 else 1.0)
        if norm == 0:
            self.problems.append(f"{name}: reference is all zero (no signal)")
        self.rows.append((label or name, err))

    def problem(self, msg):
        self.problems.append(msg)


def check_schema(f, c):
    """Dtypes and attributes the README prescribes."""
    def walk(name, obj):
        if not isinstance(obj, h5py.Dataset):
            return
        want = np.int64 if name in INT_DATASETS else np.float64
        if obj.dtype != want:
            c.problem(f"{name}: dtype {obj.dtype}, schema says {np.dtype(want)}")
    f.visititems(walk)
    cfg = f["config"].attrs
    for k in CONFIG_INT + CONFIG_FLOAT + ["learn_sigma"]:
        if k not in cfg:
            c.problem(f"/config attr {k} missing")
    if "learn_sigma" in cfg and not isinstance(cfg["learn_sigma"], (bool, np.bool_)):
        c.problem(f"/config learn_sigma is {type(cfg['learn_sigma']).__name__}, not bool")
    for grp, keys in {"adamw": ["lr", "beta1", "beta2", "eps", "weight_decay"],
                      "ema": ["decay"], "sample": ["respacing"], "sample/cfg": ["scale"],
                      "distill": ["output_weight", "feature_weight", "mask_sigma", "learn_sigma",
                                  "diffusion_steps", "teacher_depth"]}.items():
        if grp not in f and (grp == "distill" or "weights" not in f):
            continue  # optional /distill; a /config + /distill file has no DiT groups
        for k in keys:
            if k not in f[grp].attrs:
                c.problem(f"/{grp} attr {k} missing")
    if "weights" in f and h5py.check_string_dtype(f.attrs.get_id("trainable").dtype) is None:
        c.problem("/ attr trainable is not an array of strings")


def build_model(f, c):
    a = f["config"].attrs
    model = torch_dit.DiT(
        input_size=int(a["input_size"]), patch_size=int(a["patch_size"]),
        in_channels=int(a["in_channels"]), hidden_size=int(a["hidden_size"]),
        depth=int(a["depth"]), num_heads=int(a["num_heads"]), mlp_ratio=float(a["mlp_ratio"]),
        class_dropout_prob=float(a["class_dropout_prob"]), num_classes=int(a["num_classes"]),
        learn_sigma=bool(a["learn_sigma"])).double().eval()
    if int(a["out_channels"]) != model.out_channels:
        c.problem(f"/config out_channels {a['out_channels']} != {model.out_channels}")
    if int(a["num_patches"]) != model.x_embedder.num_patches:
        c.problem(f"/config num_patches {a['num_patches']} != {model.x_embedder.num_patches}")
    computed_pe = model.pos_embed.detach().clone()
    sd = model.state_dict()
    if set(f["weights"].keys()) != set(sd.keys()):
        c.problem(f"/weights names differ from the state_dict: "
                  f"{sorted(set(f['weights'].keys()) ^ set(sd.keys()))}")
    model.load_state_dict({k: c.ref(f"weights/{k}") for k in sd})
    c.rows.append(("(pos_embed: file vs get_2d_sincos_pos_embed)",
                   ((model.pos_embed - computed_pe).norm() / computed_pe.norm()).item()))
    trainable = [s.decode() if isinstance(s, bytes) else str(s) for s in f.attrs["trainable"]]
    if trainable != model.trainable_names():
        c.problem(f"/ attr trainable {trainable} != {model.trainable_names()}")
    return model


def params(model):
    return dict((n, p) for n, p in model.named_parameters() if p.requires_grad)


def check_forward(f, c, model):
    x = c.ref("forward/x").requires_grad_(True)
    t, y = c.ref("forward/t"), c.ref("forward/y")
    if y[-1].item() != model.num_classes:
        c.problem("forward/y: last label is not the null label")
    model.zero_grad(set_to_none=True)
    out = model(x, t, y)
    (out * c.ref("forward/cotangent")).sum().backward()
    c.compare("forward/out", out)
    c.compare("forward/dx", x.grad)
    for n, p in params(model).items():
        c.compare(f"forward/grads/{n}", p.grad)


def check_loss(f, c, model):
    learn_sigma = model.learn_sigma
    diffusion = torch_dit.Diffusion("", learn_sigma=learn_sigma)
    for n, arr in diffusion.schedule_arrays().items():
        c.compare(f"schedule/{n}", torch.from_numpy(arr))
    t = c.ref("loss/t")
    if t[0].item() != 0:
        c.problem("loss/t[0] != 0: the discretized-likelihood branch is not exercised")
    model.zero_grad(set_to_none=True)
    terms = diffusion.training_losses(model, c.ref("loss/x_start"), t, c.ref("loss/y"),
                                      c.ref("loss/noise"))
    if attr_str(f["config"].attrs, "loss_weight", "none") == "min_snr":
        terms = min_snr_terms(diffusion, terms, t, float(f["config"].attrs["min_snr_gamma"]))
        for k in ("weight", "mse_raw"):
            c.compare(f"loss/{k}", terms[k])
    terms["loss"].mean().backward()
    for k in ("loss", "mse", "vb"):
        if k in terms:
            c.compare(f"loss/{k}", terms[k])
        elif f"loss/{k}" in f:
            c.problem(f"loss/{k} present but learn_sigma is false")
    for n, p in params(model).items():
        c.compare(f"loss/grads/{n}", p.grad)


def attr_str(attrs, key, default):
    v = attrs.get(key, default)
    return v.decode() if isinstance(v, bytes) else str(v)


def min_snr_terms(diffusion, terms, t, gamma):
    """Min-SNR-gamma for epsilon prediction (Hang et al. 2023, their training_losses):
    weight = min(snr, gamma) / snr, snr = (alpha / sigma)^2 of the extracted coefficients
    (float32-rounded as the official _extract_into_tensor), applied to mse only: loss = w mse + vb."""
    alpha = torch.from_numpy(diffusion.sqrt_alphas_cumprod)[t].float().double()
    sigma = torch.from_numpy(diffusion.sqrt_one_minus_alphas_cumprod)[t].float().double()
    snr = (alpha / sigma) ** 2
    w = torch.minimum(snr, torch.full_like(snr, gamma)) / snr
    w[snr == 0] = 1.0
    out = dict(terms, weight=w, mse_raw=terms["mse"], mse=w * terms["mse"])
    out["loss"] = out["mse"] + terms["vb"] if "vb" in terms else out["mse"]
    return out


def check_adamw_ema(f, c, model):
    """One AdamW step from /weights with /loss/grads; EMA from /weights and the stepped params."""
    a = f["adamw"].attrs
    ps = params(model)
    with torch.no_grad():
        for n, p in ps.items():
            p.copy_(c.ref(f"weights/{n}"))
            p.grad = c.ref(f"loss/grads/{n}").clone()
    opt = torch.optim.AdamW(list(ps.values()), lr=float(a["lr"]),
                            betas=(float(a["beta1"]), float(a["beta2"])), eps=float(a["eps"]),
                            weight_decay=float(a["weight_decay"]))
    opt.step()
    decay = float(f["ema"].attrs["decay"])
    for n, p in ps.items():
        c.compare(f"adamw/params_after/{n}", p)
        ema = c.ref(f"weights/{n}").clone().mul_(decay).add_(p.detach(), alpha=1 - decay)
        c.compare(f"ema/after/{n}", ema)
    with torch.no_grad():   # restore /weights for the sampling checks
        for n, p in ps.items():
            p.copy_(c.ref(f"weights/{n}"))


def check_sample(f, c, model):
    g = f["sample"]
    respacing = g.attrs["respacing"]
    respacing = respacing.decode() if isinstance(respacing, bytes) else str(respacing)
    diffusion = torch_dit.Diffusion(respacing, learn_sigma=model.learn_sigma)
    c.compare("sample/timestep_map", torch.tensor(diffusion.timestep_map, dtype=torch.int64))
    c.compare("sample/betas", torch.from_numpy(diffusion.betas))
    x, t, y = c.ref("sample/x_t"), c.ref("sample/t"), c.ref("sample/y")
    with torch.no_grad():
        out = diffusion.p_sample(model, x, t, y, c.ref("sample/ddpm_noise"))
        c.compare("sample/ddpm_out", out["sample"])
        c.compare("sample/pred_xstart", out["pred_xstart"])
        c.compare("sample/ddim_out", diffusion.ddim_sample(model, x, t, y)["sample"])
        cfg = g["cfg"]
        guided = int(cfg.attrs["guided_channels"]) if "guided_channels" in cfg.attrs else 3
        cfg_out = model.forward_with_cfg(c.ref("sample/cfg/x"), c.ref("sample/cfg/t"),
                                         c.ref("sample/cfg/y"), float(cfg.attrs["scale"]),
                                         guided_channels=guided)
        c.compare("sample/cfg/out", cfg_out)


def check_prune(f, c, model):
    """/prune/bi_score (optional): per block, mean cosine similarity of its output and input on
    /forward's inputs, recomputed with a forward hook on every block."""
    if "prune" not in f:
        return
    sims = {}
    hooks = [b.register_forward_hook(
        lambda m, i, o, k=k: sims.__setitem__(k, torch.nn.functional.cosine_similarity(o, i[0], dim=-1).mean()))
        for k, b in enumerate(model.blocks)]
    with torch.no_grad():
        model(c.ref("forward/x"), c.ref("forward/t"), c.ref("forward/y"))
    for h in hooks:
        h.remove()
    c.compare("prune/bi_score", torch.stack([sims[k] for k in range(len(model.blocks))]))


def check_distill(f, c, repo):
    """/distill (optional): TinyFusion's KD terms and gradients, recomputed by running the
    reference (tools/distill_golden.py) again on the stored inputs, and the masked feature loss and
    its gradient also written out directly."""
    if "distill" not in f:
        return
    import distill_golden  # noqa: E402
    g = f["distill"]
    pairs = int(g["student_layers"].shape[0])
    for k in ("x_start", "noise", "t", "out", "tout", "student_layers", "teacher_layers"):
        c.ref(f"distill/{k}")
    for name, v in distill_golden.recompute(g, repo).items():
        c.compare(f"distill/{name}", v)
    total = 0
    sigma = float(g.attrs["mask_sigma"])
    for k in range(pairs):
        loss, grad = distill_golden.masked_feature(c.ref(f"distill/fs/{k}"), c.ref(f"distill/ft/{k}"),
                                                   sigma)
        total = total + loss
        c.compare(f"distill/grad_fs/{k}", grad * float(g.attrs["feature_weight"]) / pairs,
                  f"distill/grad_fs/{k} (written out)")
    c.compare("distill/feat_loss", total / pairs, "distill/feat_loss (written out)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--tol", type=float, default=1e-12,
                    help="max relative L2 error per tensor (float64 vs float64)")
    ap.add_argument("--quiet", action="store_true", help="print only the summary")
    ap.add_argument("--tinyfusion", default="/work/.mirror/VainF+TinyFusion/repo",
                    help="TinyFusion checkout or git directory (for a file with /distill)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    with h5py.File(args.file, "r") as f:
        if attr_str(f["config"].attrs, "objective", "ddpm") != "ddpm":
            print(f"{args.file}: objective {attr_str(f['config'].attrs, 'objective', '')} is "
                  f"not a DiT/DDPM file; tools/make_flow_golden.py writes and self-checks those")
            return 2
        c = Checker(f, args.tol)
        check_schema(f, c)
        if "weights" in f:  # else a /config + /distill file (tools/make_distill_golden.py)
            model = build_model(f, c)
            check_forward(f, c, model)
            check_loss(f, c, model)
            check_adamw_ema(f, c, model)
            check_sample(f, c, model)
            check_prune(f, c, model)
        check_distill(f, c, args.tinyfusion)
        all_ds = set()
        f.visititems(lambda n, o: all_ds.add(n) if isinstance(o, h5py.Dataset) else None)
        for n in sorted(all_ds - c.covered):
            c.problem(f"{n}: dataset not checked")
    for name, err in c.rows:
        if not args.quiet or err > args.tol:
            print(f"{err:10.3e}  {name}{'   <-- FAIL' if err > args.tol else ''}")
    worst_name, worst = max(c.rows, key=lambda r: r[1])
    for p in c.problems:
        print(f"PROBLEM: {p}")
    print(f"{args.file}: {len(c.rows)} tensors, worst relative L2 error {worst:.3e} ({worst_name})")
    ok = worst <= args.tol and not c.problems
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

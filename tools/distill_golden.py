"""The /distill golden group: TinyFusion's masked knowledge distillation, in float64, computed by
TinyFusion's own `GaussianDiffusion.training_losses_kd_rep` (diffusion/gaussian_diffusion.py with
`_vb_terms_bpd_kd`; Fang et al. 2025).

Per sample the reference's loss is
  loss = alpha_kd (kd mse + vb_kd) + (1 - alpha_kd) (mse + vb) + beta_feat feat_loss,
where kd mse is the mean squared difference of the student's and the teacher's predictions, vb_kd
the KL of the student's posterior against the teacher's (the decoder NLL at t = 0), mse + vb the
recipe's loss, and feat_loss the mean over the feature pairs of the masked feature loss (values
farther than 2 standard deviations from the sample's mean zeroed in each hidden state).

The reference is called with stand-ins for the student and the teacher that return given tensors:
`model(x_t, t, return_cfg_drop=True, **kw)` returns (the student output, a leaf requiring grad;
drop ids None) and `model.module.blocks[i]` carries `.feature` (a leaf requiring grad) and, when
paired, `.target_layer`; `teacher(x_t, t, cfg_drop_ids=..., **kw)` returns the teacher output and
`teacher.blocks[j].feature` its hidden state. mean_N(loss) is backpropagated for d/d out and d/d
each student feature. The reference's modules import only numpy and torch: nothing is shimmed.

A library: tools/make_distill_golden.py writes a /config + /distill file (the config only names
the data shape); make_golden.py --distill adds the same group to a full golden file.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import types

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_shims  # noqa: E402

F64 = torch.float64
DEFAULT_REPO = "/work/.mirror/VainF+TinyFusion/repo"
MASK_SIGMA = 2.0       # the reference's mask: |x - mean| < 2 std (fixed in its code)
DIFFUSION_STEPS = 1000


def reference_modules(repo):
    """TinyFusion's `diffusion` package from `repo`: a checkout (a folder holding diffusion/) or a
    git directory (its HEAD, extracted with git archive into a temporary folder)."""
    if os.path.isfile(os.path.join(repo, "diffusion", "gaussian_diffusion.py")):
        return ref_shims.import_repo(repo, ["diffusion"])["diffusion"], repo_commit(repo)
    tmp = tempfile.mkdtemp(prefix="tinyfusion_")
    tar = subprocess.run(["git", "--git-dir", repo, "archive", "HEAD", "diffusion"], check=True,
                         capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", tmp], input=tar, check=True)
    return ref_shims.import_repo(tmp, ["diffusion"])["diffusion"], repo_commit(repo)


def repo_commit(repo):
    for flag in ("--git-dir", "-C"):
        r = subprocess.run(["git", flag, repo, "rev-parse", "HEAD"], capture_output=True, text=True)
        if r.returncode == 0:
            return r.stdout.strip()
    return "unknown"


def spread(x, gen, planted):
    """Plants `planted` values per sample 3 to 4 standard deviations out (so the 2-std mask
    drops them), then moves every value within 5% of the mask's edge inside it, so fp32 or bf16
    rounding cannot flip a mask entry (the statistics move with each pass: repeated until none is
    near the edge)."""
    n = x.shape[0]
    flat = x.reshape(n, -1)
    for i in range(n):
        idx = torch.randperm(flat.shape[1], generator=gen)[:planted]
        sign = torch.where(torch.rand(planted, generator=gen, dtype=F64) < 0.5, -1.0, 1.0)
        s = flat[i].std().item()
        flat[i, idx] = flat[i].mean() + sign * (3 + torch.rand(planted, generator=gen, dtype=F64)) * s
        for _ in range(100):
            var, mean = torch.var_mean(flat[i])
            z = (flat[i] - mean) / (MASK_SIGMA * var.sqrt())
            near = (z.abs() - 1).abs() < 0.05
            if not near.any():
                break
            flat[i, near] = mean + torch.sign(z[near]) * 0.85 * MASK_SIGMA * var.sqrt()
        else:
            raise RuntimeError("spread: values near the mask edge remain")
    return flat.reshape(x.shape)


def distill_inputs(gen, n, c, hw, tokens, width, learn_sigma, pairs):
    """Random float64 inputs: x_start in [-1, 1] (some at the edges: every branch of the decoder
    NLL), t with 0 (the decoder NLL) and 1, outputs near the noise, features with outliers."""
    x_start = 2 * torch.rand(n, c, hw, hw, generator=gen, dtype=F64) - 1
    x_start.view(-1)[::7] = torch.sign(x_start.view(-1)[::7])
    noise = torch.randn(n, c, hw, hw, generator=gen, dtype=F64)
    t = torch.randint(2, DIFFUSION_STEPS, (n,), generator=gen)
    t[0], t[1] = 0, 1
    co = 2 * c if learn_sigma else c

    def output():
        o = torch.randn(n, co, hw, hw, generator=gen, dtype=F64)
        o[:, :c] = noise + 0.3 * o[:, :c]
        if learn_sigma:
            o[:, c:] = 1.2 * torch.rand(n, c, hw, hw, generator=gen, dtype=F64) - 0.6
        return o

    out, tout = output(), output()
    fs, ft = [], []
    for _ in pairs:
        base = 0.7 * torch.randn(n, tokens, width, generator=gen, dtype=F64) + 0.1
        fs.append(spread(base + 0.5 * torch.randn(base.shape, generator=gen, dtype=F64), gen, 3))
        ft.append(spread(base + 0.5 * torch.randn(base.shape, generator=gen, dtype=F64), gen, 3))
    return dict(x_start=x_start, noise=noise, t=t, out=out, tout=tout, fs=fs, ft=ft)


def run_reference(diffusion_pkg, inp, pairs, teacher_depth, learn_sigma, output_weight,
                  feature_weight):
    """training_losses_kd_rep on the given tensors; returns its terms and the gradients of
    mean_N(loss) with respect to the student output and each student feature."""
    out = inp["out"].clone().requires_grad_(True)
    fs = [f.clone().requires_grad_(True) for f in inp["fs"]]
    student_depth = max(s for s, _ in pairs) + 1
    blocks = [types.SimpleNamespace(feature=None) for _ in range(student_depth)]
    for k, (s, tl) in enumerate(pairs):
        blocks[s].feature, blocks[s].target_layer = fs[k], tl
    tblocks = [types.SimpleNamespace(feature=None) for _ in range(teacher_depth)]
    for k, (_, tl) in enumerate(pairs):
        tblocks[tl].feature = inp["ft"][k]

    class Student:
        module = types.SimpleNamespace(blocks=blocks)

        def __call__(self, x_t, t, return_cfg_drop=False, **kw):
            assert return_cfg_drop
            return out, None

    class Teacher:
        def __init__(self):
            self.blocks = tblocks

        def __call__(self, x_t, t, cfg_drop_ids=None, **kw):
            return inp["tout"].clone()

    diffusion = diffusion_pkg.create_diffusion(timestep_respacing="", learn_sigma=learn_sigma,
                                               diffusion_steps=DIFFUSION_STEPS)
    with ref_shims.Float64():
        terms = diffusion.training_losses_kd_rep(
            Student(), Teacher(), inp["x_start"], inp["t"], model_kwargs={}, noise=inp["noise"],
            beta_feat=feature_weight, alpha_kd=output_weight)
    terms["loss"].mean().backward()
    res = {k: v.detach() for k, v in terms.items() if torch.is_tensor(v)}
    return res, out.grad.detach(), [f.grad.detach() for f in fs]


def distill_group(gen, n, c, hw, tokens, width, learn_sigma, repo, output_weight=0.9,
                  feature_weight=0.3, pairs=((0, 1), (1, 3), (2, 5)), teacher_depth=6):
    """Builds the inputs, runs the reference, and returns (tensors, attrs) of the /distill group."""
    pkg, commit = reference_modules(repo)
    inp = distill_inputs(gen, n, c, hw, tokens, width, learn_sigma, pairs)
    terms, grad_out, grad_fs = run_reference(pkg, inp, pairs, teacher_depth, learn_sigma,
                                             output_weight, feature_weight)
    g = {k: inp[k] for k in ("x_start", "noise", "t", "out", "tout")}
    for k in range(len(pairs)):
        g[f"fs/{k}"], g[f"ft/{k}"], g[f"grad_fs/{k}"] = inp["fs"][k], inp["ft"][k], grad_fs[k]
    g["student_layers"] = torch.tensor([s for s, _ in pairs], dtype=torch.int64)
    g["teacher_layers"] = torch.tensor([t for _, t in pairs], dtype=torch.int64)
    names = ["loss", "kd_loss", "gt", "feat_loss", "mse"] + (["vb_kd", "vb"] if learn_sigma else [])
    for k in names:
        g[k] = terms[k]
    g["grad_out"] = grad_out
    attrs = dict(output_weight=np.float64(output_weight), feature_weight=np.float64(feature_weight),
                 mask_sigma=np.float64(MASK_SIGMA), learn_sigma=np.bool_(learn_sigma),
                 diffusion_steps=np.int64(DIFFUSION_STEPS), teacher_depth=np.int64(teacher_depth),
                 source=f"TinyFusion diffusion/gaussian_diffusion.py training_losses_kd_rep @ "
                        f"{commit}, float64 (tools/distill_golden.py)")
    return g, attrs


def recompute(grp, repo):
    """The reference on a file's stored /distill inputs: {dataset name: tensor} of its outputs."""
    pkg, _ = reference_modules(repo)
    ref = lambda k: torch.from_numpy(np.asarray(grp[k][()]))  # noqa: E731
    pairs = list(zip(ref("student_layers").tolist(), ref("teacher_layers").tolist()))
    learn_sigma = bool(grp.attrs["learn_sigma"])
    inp = {k: ref(k) for k in ("x_start", "noise", "t", "out", "tout")}
    inp["fs"] = [ref(f"fs/{k}") for k in range(len(pairs))]
    inp["ft"] = [ref(f"ft/{k}") for k in range(len(pairs))]
    terms, grad_out, grad_fs = run_reference(
        pkg, inp, pairs, int(grp.attrs["teacher_depth"]), learn_sigma,
        float(grp.attrs["output_weight"]), float(grp.attrs["feature_weight"]))
    got = {k: terms[k] for k in ("loss", "kd_loss", "gt", "feat_loss", "mse", "vb_kd", "vb")
           if k in terms}
    got["grad_out"] = grad_out
    for k, g in enumerate(grad_fs):
        got[f"grad_fs/{k}"] = g
    return got


def masked_feature(fs, ft, sigma):
    """The masked feature loss per sample and d mean_N(loss) / d fs, written out directly (an
    implementation independent of the reference's, for tools/check_golden.py)."""
    def keep(x):
        var, mean = torch.var_mean(x, dim=[1, 2], keepdim=True)
        return ((x - mean).abs() < sigma * var.sqrt()).to(x.dtype)
    ks, kt = keep(fs), keep(ft)
    diff = ks * fs - kt * ft
    m = fs[0].numel()
    return (diff ** 2).mean(dim=[1, 2]), 2 * ks * diff / (m * fs.shape[0])


def write_distill(f, tensors, attrs):
    grp = f.require_group("distill")
    for name, v in tensors.items():
        arr = v.detach().cpu().numpy()
        arr = arr.astype(np.int64 if arr.dtype.kind in "iu" else np.float64)
        grp.create_dataset(name, data=arr, track_times=False)
    for k, v in attrs.items():
        grp.attrs[k] = v

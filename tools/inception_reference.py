#!/usr/bin/env python3
"""Reference numbers for dit_mp's Inception-V3 FID path, made offline (nothing is downloaded).

  inception_reference.py OUT_DIR [--images N] [--seed S]

Builds the FID Inception-V3 in PyTorch (tools/torch_inception.py) with seeded random weights and
BatchNorm statistics measured on images (then perturbed, so every folded scale and shift is
non-trivial), saves its state dict and converts it with tools/convert_inception.py, and computes,
for two sets of N images (set a: RGB 32x32, set b: grey 28x28, different content):
  OUT_DIR/inception_random.pth    the state dict (the converter's input)
  OUT_DIR/inception_random.h5     the converted weights (what dit_mp reads)
  OUT_DIR/reference.h5            /images_a (N,3,32,32) and /images_b (N,1,28,28) float32 in
                                  [-1, 1]; /features_a, /features_b (N,2048) float64; attribute
                                  fid = FID(b, a) computed as the community's PyTorch FID code
                                  does (scipy.linalg.sqrtm of sigma_b sigma_a)
  OUT_DIR/stats_a.npz             mu (2048,) and sigma (2048,2048) of set a, float64, np.savez
  OUT_DIR/stats_a_compressed.npz  the same in float32 through np.savez_compressed (deflate)
  OUT_DIR/bad_shape.h5, missing_tensor.h5   small sealed weights files with one tensor misshapen or
                                  missing, for the loader's error messages
Used by the unit test InceptionReference.* (registered in tests/CMakeLists.txt as a fixture).
When PyTorch, h5py or scipy is missing it writes OUT_DIR/SKIPPED with the reason and exits 0.
"""
import argparse
import os
import sys
import time


def skip(out_dir, why):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "SKIPPED"), "w") as f:
        f.write(why + "\n")
    print(f"inception_reference: skipped: {why}")
    sys.exit(0)


def frechet_distance(mu1, sigma1, mu2, sigma2):
    """||mu1 - mu2||^2 + tr(S1 + S2 - 2 sqrtm(S1 S2)), as the community's FID code computes it:
    scipy's sqrtm of the (non-symmetric) product, a 1e-6 diagonal offset when that is not finite,
    and the real part."""
    import numpy as np
    from scipy import linalg
    diff = mu1 - mu2
    covmean, _ = linalg.sqrtm(sigma1.dot(sigma2), disp=False)
    if not np.isfinite(covmean).all():
        offset = np.eye(sigma1.shape[0]) * 1e-6
        covmean = linalg.sqrtm((sigma1 + offset).dot(sigma2 + offset))
        print("inception_reference: singular product; used the 1e-6 offset")
    if np.iscomplexobj(covmean):
        imag = np.abs(np.diagonal(covmean).imag).max()
        if imag > 1e-3:
            sys.exit(f"inception_reference: sqrtm has an imaginary part of {imag}")
        covmean = covmean.real
    return float(diff.dot(diff) + np.trace(sigma1) + np.trace(sigma2) - 2 * np.trace(covmean))


def images(torch, n, channels, size, seed):
    """Smooth random content in [-1, 1]: a low-resolution random field upsampled, plus a gradient
    and fine noise, so the resize and every branch see structure."""
    g = torch.Generator().manual_seed(seed)
    coarse = torch.rand(n, channels, 5, 5, generator=g) * 2 - 1
    x = torch.nn.functional.interpolate(coarse, size=(size, size), mode="bicubic", align_corners=True)
    ramp = torch.linspace(-0.5, 0.5, size).view(1, 1, 1, size)
    x = x + ramp * (torch.rand(n, 1, 1, 1, generator=g) - 0.5) + 0.1 * torch.randn(x.shape, generator=g)
    return x.clamp(-1, 1).contiguous()


def randomized_model(torch, torch_inception, seed):
    """Seeded random weights; BatchNorm running statistics measured on a calibration batch (so the
    activations stay O(1) through the 94 layers), then scale and shift perturbed."""
    torch.manual_seed(seed)
    model = torch_inception.FIDInceptionV3()
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for bn in bns:
        bn.momentum = None  # cumulative average: one batch sets the running stats to its own
    model.train()
    with torch.no_grad():
        model(images(torch, 4, 3, 40, seed + 1))
        for bn in bns:
            bn.weight.uniform_(0.6, 1.4)
            bn.bias.normal_(0.0, 0.2)
            bn.running_mean.add_(0.05 * torch.randn_like(bn.running_mean))
            bn.running_var.mul_(torch.empty_like(bn.running_var).uniform_(0.8, 1.25))
    return model.eval()


def bad_weight_files(out_dir, state):
    """Sealed files in the converter's layout, broken on purpose: the first convolution's weight
    misshapen, or its BatchNorm variance missing."""
    import h5py
    import convert_inception
    from dit_checkpoint import SEAL_BYTES, seal
    first = "Conv2d_1a_3x3"
    for name, tensors in (
            ("bad_shape.h5", {f"{first}.conv.weight": state[f"{first}.conv.weight"][..., :2]}),
            ("missing_tensor.h5", {k: v for k, v in state.items()
                                   if k.startswith(first + ".") and not k.endswith(("running_var", "tracked"))})):
        path = os.path.join(out_dir, name)
        with h5py.File(path, "w", userblock_size=SEAL_BYTES) as f:
            f.attrs["format"] = convert_inception.FORMAT
            f.attrs["version"] = convert_inception.VERSION
            for k, v in tensors.items():
                f.create_dataset("weights/" + k, data=v.float().numpy(), fletcher32=True)
        seal(path)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--images", type=int, default=16, help="images per set")
    p.add_argument("--seed", type=int, default=14)
    a = p.parse_args()
    try:
        import h5py
        import numpy as np
        import scipy.linalg  # noqa: F401
        import torch
    except ImportError as e:
        skip(a.out_dir, f"{e.name} is not installed (Debian: python3-torch python3-h5py python3-scipy)")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import convert_inception
    import torch_inception

    os.makedirs(a.out_dir, exist_ok=True)
    stale = os.path.join(a.out_dir, "SKIPPED")
    if os.path.exists(stale):
        os.remove(stale)
    # One thread: ctest runs tests side by side, and spinning threads on a busy machine cost more
    # than they gain; DIT_REF_THREADS overrides.
    torch.set_num_threads(int(os.environ.get("DIT_REF_THREADS", "1")))
    t0 = time.time()
    model = randomized_model(torch, torch_inception, a.seed)
    pth = os.path.join(a.out_dir, "inception_random.pth")
    torch.save(model.state_dict(), pth)
    convert_inception.convert(pth, os.path.join(a.out_dir, "inception_random.h5"))
    bad_weight_files(a.out_dir, model.state_dict())

    t_model = time.time() - t0
    xa = images(torch, a.images, 3, 32, a.seed + 2)
    xb = images(torch, a.images, 1, 28, a.seed + 3) * 0.8 + 0.1
    with torch.no_grad():
        fa = model(xa).double().numpy()
        fb = model(xb).double().numpy()
    t_features = time.time() - t0 - t_model
    mu_a, sigma_a = fa.mean(axis=0), np.cov(fa, rowvar=False)
    mu_b, sigma_b = fb.mean(axis=0), np.cov(fb, rowvar=False)
    fid = frechet_distance(mu_b, sigma_b, mu_a, sigma_a)

    ref = os.path.join(a.out_dir, "reference.h5")
    with h5py.File(ref + ".tmp", "w") as f:
        f["images_a"], f["images_b"] = xa.numpy(), xb.numpy()
        f["features_a"], f["features_b"] = fa, fb
        f.attrs["fid"] = fid
    os.replace(ref + ".tmp", ref)
    np.savez(os.path.join(a.out_dir, "stats_a.npz"), mu=mu_a, sigma=sigma_a)
    np.savez_compressed(os.path.join(a.out_dir, "stats_a_compressed.npz"),
                        mu=mu_a.astype(np.float32), sigma=sigma_a.astype(np.float32))
    print(f"inception_reference: {a.images} + {a.images} images, feature rms {np.sqrt((fa ** 2).mean()):.4g}, "
          f"FID(b, a) = {fid:.6f}; seconds: model {t_model:.1f}, features {t_features:.1f}, "
          f"total {time.time() - t0:.1f} -> {a.out_dir}")


if __name__ == "__main__":
    main()

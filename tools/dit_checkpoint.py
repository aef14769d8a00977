#!/usr/bin/env python3
"""Official DiT, SiT and LightningDiT weights in and out of dit_mp.

  dit_checkpoint.py import MODEL.pt OUT.h5 --num-heads H [--input-size N] [--class-dropout-prob P]
                    [--family dit|sit|lightning] [--mlp-ratio R]
      An official state dict (e.g. DiT-XL-2-256x256.pt, or a training checkpoint holding "model"
      and "ema"; --kind picks one) -> a dit_mp weights file: /weights/<PyTorch name> float32 and
      the model config as attributes of /config. `dit_mp sample --weights OUT.h5` and
      `dit_mp train --init-from OUT.h5` load it at any layout.
      --family sit (SiT's keys are DiT's): SiT's model discards the learned-sigma half of its final
      layer's output, so those rows of final_layer.linear are dropped (said once) and the model is
      imported with learn_sigma = false and objective = flow (a velocity model: dit_mp samples it
      with euler, heun or euler_maruyama). --family lightning (found by itself from mlp.w12, norm1 or
      q_norm keys): SwiGLU (w12, w3), RMSNorm (norm weights), q/k norm and RoPE (its buffers
      feat_rope.* are recomputed and dropped) become /config attrs mlp, norm, qk_norm, pos_embed;
      --mlp-ratio (default 4) is the ratio LightningDiT built w12 from (checked against its width);
      a learned-sigma half is dropped as for SiT.
  dit_checkpoint.py seal FILE.h5 [OUT.h5] | seal STEP_FOLDER
      Writes the seal (size and CRC-32 in a 512-byte user block) that dit_mp checks before it reads
      a weights or dataset file: after editing one with h5py, or for a file from before seals. For
      a checkpoint step folder from before dit_mp checksummed index.h5, records it in COMPLETE.
  dit_checkpoint.py export SOURCE OUT.pt [--kind model|ema]
      A dit_mp weights file or checkpoint (step folder, its root, or index.h5; its virtual
      datasets read as full tensors) -> a state dict that the official models.py loads
      (pos_embed included, computed as the official code does). A model with LightningDiT's
      variants exports LightningDiT's state dict (its RoPE buffers included), which its
      models/lightningdit.py loads strictly; a DiT model without learned sigma loads into SiT's.

Needs PyTorch, h5py and numpy (Debian: python3-torch python3-h5py python3-numpy).
"""
import argparse
import math
import os
import pickle
import stat
import sys
import zlib

PROG = os.path.basename(sys.argv[0])

# Each subcommand's files by role, as dit_mp declares its own (`dit_mp help files`; src/io/file_roles.h):
# (argument, role, kind). Checked before anything is read or created: no output may be an input, an
# existing output must be a file of the kind this tool writes there, and no file is a FIFO or device.
# seal rewrites SOURCE in place by design ("update"); its OUT may be SOURCE.
FILES = {
    "import": [("source", "input", "zip"), ("out", "output", "weights")],
    "export": [("source", "input", "weights_or_checkpoint"), ("out", "output", "zip")],
    "seal": [("source", "update", "sealable"), ("out", "output", "sealed")],
}
KIND_NAMES = {"zip": "a PyTorch .pt file (a zip archive)", "weights": "a dit_mp weights file",
              "weights_or_checkpoint": "a dit_mp weights file or checkpoint", "sealable": "an HDF5 file",
              "sealed": "a sealed HDF5 file (this tool's output)", "hdf5": "an HDF5 file without a seal",
              "text": "a file of another kind", "folder": "a folder", "golden": "a golden file"}
GOLDEN_GROUPS = ("forward", "loss", "schedule", "sample", "adamw", "ema", "prune", "distill", "timesteps")


def detect_kind(path):
    """What the file at `path` is, from its first bytes (a FIFO or device is never opened)."""
    st = os.stat(path)
    if stat.S_ISDIR(st.st_mode):
        return "folder"
    if not stat.S_ISREG(st.st_mode):
        return "special"
    with open(path, "rb") as f:
        head = f.read(1032)
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        return "zip"
    sealed = head.startswith(b"dit_mp sealed hdf5 1\n")
    if not sealed and b"\x89HDF\r\n\x1a\n" not in (head[:8], head[512:520], head[1024:1032]):
        return "text"
    import h5py  # noqa: PLC0415 (only when there is an HDF5 file to look into)
    try:
        with h5py.File(path, "r") as f:
            if "config" in f and any(g in f for g in GOLDEN_GROUPS):
                return "golden"
    except OSError:
        pass
    return "sealed" if sealed else "hdf5"


def fits(expected, actual, path, role):
    if expected == "zip":  # a .pt read may be the legacy (pickle, not zip) format; one written is a zip
        return actual == "zip" or (role == "input" and actual == "text")
    if expected == "weights_or_checkpoint":
        return actual in ("sealed", "hdf5", "folder")
    if expected == "weights" and actual in ("sealed", "hdf5"):
        import h5py  # noqa: PLC0415
        with h5py.File(path, "r") as f:
            return "config" in f and "weights" in f
    if expected == "sealable":
        return actual in ("sealed", "hdf5", "folder")
    return expected == actual


def identity(path):
    try:
        st = os.stat(path)
        return ("inode", st.st_dev, st.st_ino)
    except OSError:
        return ("path", os.path.realpath(path))


def check_files(a):
    """The one check of a subcommand's files (see FILES); exits with one line naming both roles."""
    uses = [(arg, role, kind, getattr(a, arg)) for arg, role, kind in FILES[a.cmd] if getattr(a, arg)]
    for arg, role, kind, path in uses:
        if os.path.exists(path) and detect_kind(path) == "special":
            sys.exit(f"{PROG} {a.cmd}: {arg} {path} is a FIFO, device or socket, expected {KIND_NAMES[kind]}")
    for arg, role, kind, path in uses:
        if role != "output":
            continue
        for iarg, irole, ikind, ipath in uses:
            if irole == "input" and identity(path) == identity(ipath):
                sys.exit(f"{PROG} {a.cmd}: output {arg} {path} is input {iarg} ({KIND_NAMES[ikind]}): "
                         f"no output may overwrite an input; choose another {arg}")
    for arg, role, kind, path in uses:
        if not os.path.exists(path):
            if role != "output":
                sys.exit(f"{PROG} {a.cmd}: {arg} {path}: no such file")
            continue
        actual = detect_kind(path)
        try:
            ok = fits(kind, actual, path, role)
        except Exception:  # noqa: BLE001 (an HDF5 file h5py cannot read is not ours)
            ok = False
        if not ok:
            what = "exists and is" if role == "output" else "is"
            sys.exit(f"{PROG} {a.cmd}: {role} {arg} {path} {what} {KIND_NAMES.get(actual, actual)}, expected "
                     f"{KIND_NAMES[kind]}" + ("; move it or choose another " + arg if role == "output" else ""))


def print_files():
    for cmd, files in FILES.items():
        for arg, role, kind in files:
            print(f"{cmd} {role} @{arg} {kind} -")


if __name__ == "__main__" and sys.argv[1:] == ["files"]:  # hidden: the declarations, one a line
    print_files()
    sys.exit(0)

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_dit  # noqa: E402  (the official architecture, for pos_embed and checks)


def is_lightning(state):
    return any(k.startswith("blocks.0.") and (".mlp.w12." in k or ".norm1." in k or ".q_norm." in k)
               for k in state)


def lightning_config(state, hidden, num_heads, mlp_ratio):
    """LightningDiT's block variants from its state dict: /config attrs, and the MLP ratio."""
    cfg = {"mlp": "gelu", "norm": "layernorm", "pos_embed": "sincos", "qk_norm": 0}
    if "blocks.0.mlp.w12.weight" in state:
        width = state["blocks.0.mlp.w12.weight"].shape[0] // 2
        if int(2 / 3 * int(hidden * mlp_ratio)) != width:
            sys.exit(f"import: w12 is 2 x {width} wide, but --mlp-ratio {mlp_ratio} gives "
                     f"int(2/3 * int({hidden} * {mlp_ratio})) = {int(2 / 3 * int(hidden * mlp_ratio))}; "
                     f"give the ratio the model was built with")
        cfg["mlp"] = "swiglu"
    else:
        mlp_ratio = state["blocks.0.mlp.fc1.weight"].shape[0] / hidden
    if "blocks.0.norm1.weight" in state:
        cfg["norm"] = "rmsnorm"
    if "blocks.0.attn.q_norm.weight" in state:
        cfg["qk_norm"] = 1
        if ("blocks.0.attn.q_norm.bias" in state) == (cfg["norm"] == "rmsnorm"):
            sys.exit("import: the q/k norm's kind (bias: LayerNorm) does not match the block norms'")
    if "feat_rope.freqs_cos" in state:
        cfg["pos_embed"] = "rope"
        if (hidden // num_heads) % 4:
            sys.exit(f"import: RoPE needs a head dim divisible by 4, --num-heads {num_heads} gives "
                     f"{hidden // num_heads}")
    return cfg, mlp_ratio


def drop_sigma_half(state, in_channels, patch, family):
    """The rows of final_layer.linear that SiT and LightningDiT discard (their forward keeps
    x.chunk(2, dim=1)[0]): row (i, j, c) of the 2C outputs per patch pixel, c >= C dropped."""
    w, b = state["final_layer.linear.weight"], state["final_layer.linear.bias"]
    keep = [r for r in range(w.shape[0]) if r % (2 * in_channels) < in_channels]
    state["final_layer.linear.weight"], state["final_layer.linear.bias"] = w[keep], b[keep]
    print(f"import: {family}'s model discards the learned-sigma half of its final layer's output: "
          f"dropped {w.shape[0] - len(keep)} of {w.shape[0]} rows of final_layer.linear (learn_sigma = 0)")


def config_from_state(state, num_heads, input_size, dropout, family="dit", mlp_ratio=4.0):
    """The model config implied by a state dict's shapes (heads are not in it). SiT and
    LightningDiT states lose their learned-sigma rows here (see drop_sigma_half)."""
    w = state["x_embedder.proj.weight"]
    hidden, in_channels, patch = w.shape[0], w.shape[1], w.shape[2]
    depth = len({k.split(".")[1] for k in state if k.startswith("blocks.")})
    variants = {}
    if family == "lightning":
        variants, mlp_ratio = lightning_config(state, hidden, num_heads, mlp_ratio)
        mlp = int(hidden * mlp_ratio)
    else:
        mlp = state["blocks.0.mlp.fc1.weight"].shape[0]
    if family != "dit" and state["final_layer.linear.weight"].shape[0] == 2 * in_channels * patch * patch:
        drop_sigma_half(state, in_channels, patch, "SiT" if family == "sit" else "LightningDiT")
    if family != "dit":
        variants["objective"] = "flow"  # SiT and LightningDiT are velocity models: dit_mp samples them as such
    rows = state["y_embedder.embedding_table.weight"].shape[0]
    if input_size is None:
        tokens = state["pos_embed"].shape[1] if "pos_embed" in state else None
        if tokens is None:
            sys.exit("import: the state dict has no pos_embed; give --input-size")
        input_size = int(math.isqrt(tokens)) * patch
    if hidden % num_heads:
        sys.exit(f"import: hidden size {hidden} is not divisible by --num-heads {num_heads}")
    out = state["final_layer.linear.weight"].shape[0] // (patch * patch)
    return {
        "input_size": input_size, "patch_size": patch, "in_channels": in_channels,
        "hidden_size": hidden, "depth": depth, "num_heads": num_heads,
        "mlp_ratio": mlp / hidden, "num_classes": rows - (1 if dropout > 0 else 0),
        "learn_sigma": int(out == 2 * in_channels), "class_dropout_prob": dropout,
        "frequency_embedding_size": state["t_embedder.mlp.0.weight"].shape[1],
        "layernorm_eps": 1e-6, **variants,
    }


def load_tensors(path):
    """A .pt file's tensors only. torch.load(weights_only=True) unpickles nothing but tensors and
    plain containers, so a crafted checkpoint cannot run code on this machine; anything else is
    refused with one line."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        why = str(e).rsplit("WeightsUnpickler error:", 1)[-1].strip().replace("\n", " ")
        sys.exit(f"{PROG}: {path}: refused: it holds more than tensors "
                 f"({why}), and unpickling it could run code; load only files you trust, and convert "
                 f"them to a plain state dict first")
    except (OSError, RuntimeError, EOFError, ValueError) as e:  # missing, truncated, not a .pt
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        sys.exit(f"{PROG}: {path}: cannot read it as a PyTorch state dict ({why}); expected an official "
                 f".pt file (a truncated download? fetch it again)")


SEAL_BYTES = 512  # the HDF5 user block holding the seal (dit_mp's src/io/sealed_h5.h)


def seal(path):
    """Writes dit_mp's seal: the size and CRC-32 of the file after its 512-byte user block."""
    with open(path, "r+b") as f:
        f.seek(SEAL_BYTES)
        crc, size = 0, 0
        while chunk := f.read(1 << 20):
            crc, size = zlib.crc32(chunk, crc), size + len(chunk)
        f.seek(0)
        f.write(f"dit_mp sealed hdf5 1\nsize {size}\ncrc32 {crc:08x}\n".encode().ljust(SEAL_BYTES, b"\0"))


def seal_checkpoint(step_dir):
    """Records index.h5's size and CRC-32 in COMPLETE (a checkpoint from before dit_mp did)."""
    index, complete = os.path.join(step_dir, "index.h5"), os.path.join(step_dir, "COMPLETE")
    if not (os.path.isfile(index) and os.path.isfile(complete)):
        sys.exit(f"seal: {step_dir} is not a complete checkpoint step folder (index.h5 and COMPLETE)")
    crc, size = 0, 0
    with open(index, "rb") as f:
        while chunk := f.read(1 << 20):
            crc, size = zlib.crc32(chunk, crc), size + len(chunk)
    lines = [l for l in open(complete).read().splitlines() if not l.startswith("index.h5 ")]
    with open(complete + ".tmp", "w") as f:
        f.write("\n".join(lines + [f"index.h5 size {size} crc32 {crc:08x}"]) + "\n")
    os.replace(complete + ".tmp", complete)
    print(f"recorded the checksum of {index} in {complete}")


def cmd_seal(a):
    """Copies a weights or dataset file into one with a user block and seals it (e.g. after editing
    it with h5py, which leaves the seal stale, or for a file written before dit_mp sealed them); for
    a checkpoint step folder, records index.h5's checksum in COMPLETE."""
    if os.path.isdir(a.source):
        return seal_checkpoint(a.source)
    out = a.out or a.source
    with h5py.File(a.source, "r") as f:
        in_place = out == a.source and f.userblock_size >= SEAL_BYTES
    if in_place:  # the user block is there: only the seal is rewritten
        seal(out)
        print(f"sealed {out}")
        return
    tmp = out + ".tmp"
    with h5py.File(a.source, "r") as s, h5py.File(tmp, "w", userblock_size=SEAL_BYTES) as d:
        for k, v in s.attrs.items():
            d.attrs[k] = v
        for k in s:
            s.copy(s[k], d, name=k)
    seal(tmp)
    os.replace(tmp, out)
    print(f"sealed {out}")


def cmd_import(a):
    state = load_tensors(a.source)
    if isinstance(state, dict) and a.kind in state and isinstance(state[a.kind], dict):
        state = state[a.kind]
    state = dict(state)
    family = a.family or ("lightning" if is_lightning(state) else "dit")
    cfg = config_from_state(state, a.num_heads, a.input_size, a.class_dropout_prob, family, a.mlp_ratio)
    fixed = {"pos_embed", "feat_rope.freqs_cos", "feat_rope.freqs_sin"}  # recomputed by dit_mp
    tmp = a.out + ".tmp"
    with h5py.File(tmp, "w", userblock_size=SEAL_BYTES) as f:
        c = f.create_group("config")
        if a.diffusion_steps is not None:  # what a .pt cannot hold (dit_mp reads 1000 when absent)
            cfg["diffusion_steps"] = a.diffusion_steps
        for k, v in cfg.items():
            c.attrs[k] = (np.float64(v) if isinstance(v, float) else v if isinstance(v, str)
                          else np.int64(v))
        w = f.create_group("weights")
        for name, t in state.items():
            if name in fixed:
                continue
            # chunked with Fletcher32 checksums: dit_mp verifies every tensor on load
            w.create_dataset(name, data=t.detach().to(torch.float32).numpy(), fletcher32=True)
    seal(tmp)
    os.replace(tmp, a.out)
    print(f"wrote {a.out}: {len([n for n in state if n not in fixed])} tensors, config {cfg}")


def read_weights(path, kind):
    """name -> numpy array from a weights file or a checkpoint, and the model config."""
    if os.path.isdir(path):
        step = path
        if os.path.exists(os.path.join(path, "latest")):
            step = os.path.join(path, open(os.path.join(path, "latest")).read().strip())
        path = os.path.join(step, "index.h5")
    with h5py.File(path, "r") as f:
        group = "weights" if "weights" in f else kind
        if group not in f:
            sys.exit(f"export: {path} has neither /weights nor /{kind}")
        cfg = {k: (v.item() if hasattr(v, "item") else v) for k, v in f["config"].attrs.items()}  # str attrs: objective
        tensors = {}
        f[group].visititems(lambda n, d: tensors.__setitem__(n, d[...]) if isinstance(d, h5py.Dataset) else None)
    return tensors, cfg


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def rope_buffers(hidden, num_heads, grid):
    """LightningDiT's feat_rope.freqs_cos / freqs_sin (T, head_dim), as VisionRotaryEmbeddingFast
    computes them (frequencies in float32; per adjacent pair; rows then columns)."""
    dim = hidden // num_heads // 2
    freqs = 1.0 / (10000 ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))
    pos = torch.arange(grid) / grid * grid  # the reference's positions (ft_seq_len = pt_seq_len)
    f = pos[:, None].float() * freqs[None]  # (grid, dim/2)
    f = f.repeat_interleave(2, dim=-1)  # (grid, dim)
    full = torch.cat([f[:, None, :].expand(grid, grid, dim), f[None, :, :].expand(grid, grid, dim)], dim=-1)
    return full.cos().reshape(grid * grid, -1), full.sin().reshape(grid * grid, -1)


def cmd_export(a):
    tensors, cfg = read_weights(a.source, a.kind)
    steps = int(cfg.get("diffusion_steps", 1000))
    if steps != 1000:  # a state dict holds tensors only: say how to get the schedule back
        print(f"note: {a.source} was trained with diffusion_steps = {steps}, which a .pt cannot hold: import it "
              f"back with --diffusion-steps {steps}", file=sys.stderr)
    grid = int(cfg["input_size"]) // int(cfg["patch_size"])
    pos = torch_dit.get_2d_sincos_pos_embed(int(cfg["hidden_size"]), grid)
    state = {"pos_embed": torch.from_numpy(np.asarray(pos, dtype=np.float32)).unsqueeze(0)}
    for name, v in tensors.items():
        state[name] = torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32))
    lightning = (text(cfg.get("mlp", "gelu")) != "gelu" or text(cfg.get("norm", "layernorm")) != "layernorm"
                 or text(cfg.get("pos_embed", "sincos")) != "sincos" or int(cfg.get("qk_norm", 0)))
    if lightning:  # LightningDiT's names are dit_mp's; its checks are its own module's
        if text(cfg.get("pos_embed", "sincos")) == "rope":
            state["feat_rope.freqs_cos"], state["feat_rope.freqs_sin"] = rope_buffers(
                int(cfg["hidden_size"]), int(cfg["num_heads"]), grid)
        torch.save(state, a.out)
        print(f"wrote {a.out}: {len(state)} tensors (LightningDiT's state dict)")
        return
    model = torch_dit.DiT(
        input_size=int(cfg["input_size"]), patch_size=int(cfg["patch_size"]),
        in_channels=int(cfg["in_channels"]), hidden_size=int(cfg["hidden_size"]),
        depth=int(cfg["depth"]), num_heads=int(cfg["num_heads"]), mlp_ratio=float(cfg["mlp_ratio"]),
        class_dropout_prob=float(cfg["class_dropout_prob"]), num_classes=int(cfg["num_classes"]),
        learn_sigma=bool(cfg["learn_sigma"]))
    model.load_state_dict(state, strict=True)  # the official architecture accepts every tensor
    torch.save(model.state_dict(), a.out)
    print(f"wrote {a.out}: {len(state)} tensors")


def diffusion_steps(text):
    n = int(text)
    if not 2 <= n <= 100000:
        raise argparse.ArgumentTypeError(f"{n}: expected 2 to 100000 timesteps (dit_mp's diffusion.steps range)")
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("import", help="official .pt -> dit_mp weights file")
    i.add_argument("source")
    i.add_argument("out")
    i.add_argument("--num-heads", type=int, required=True)
    i.add_argument("--input-size", type=int)
    i.add_argument("--class-dropout-prob", type=float, default=0.1)
    i.add_argument("--kind", default="ema", help="for training checkpoints holding model and ema")
    i.add_argument("--family", choices=["dit", "sit", "lightning"],
                   help="whose state dict (default: lightning when its keys say so, else dit)")
    i.add_argument("--mlp-ratio", type=float, default=4.0, help="lightning with SwiGLU: the ratio w12 was built from")
    i.add_argument("--diffusion-steps", type=diffusion_steps, metavar="N",
                   help="the training schedule's length, recorded in the file (default: none recorded, read as 1000)")
    e = sub.add_parser("export", help="dit_mp weights or checkpoint -> official .pt")
    e.add_argument("source")
    e.add_argument("out")
    e.add_argument("--kind", default="model", choices=["model", "ema"])
    s = sub.add_parser("seal", help="(re)write a weights file's seal, the checksum dit_mp verifies first")
    s.add_argument("source")
    s.add_argument("out", nargs="?", help="default: replace SOURCE")
    a = ap.parse_args()
    check_files(a)
    torch.set_num_threads(1)
    {"import": cmd_import, "export": cmd_export, "seal": cmd_seal}[a.cmd](a)


if __name__ == "__main__":
    main()

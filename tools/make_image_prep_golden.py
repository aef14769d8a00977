#!/usr/bin/env python3
"""Reference numbers for dit_mp's image preprocessing (src/io/image_prep.h), computed by PIL itself.

Writes tests/data/image_prep/: small real pictures (crops of matplotlib's sample photo of Grace
Hopper, a US Navy photograph in the public domain) as PNG (RGB, RGBA, grayscale, palette) and JPEG
(RGB 4:2:0, grayscale, CMYK with Adobe's APP14 marker), and image_prep_golden.h5 beside them:

  /crop/<case>      uint8 (size, size, 3)  ADM's center_crop_arr as facebookresearch/DiT's train.py
                                           runs it (PIL BOX halving, BICUBIC, centre crop) on the
                                           image PIL decodes and converts to RGB; attrs file, size
  /decoded/<file>   uint8 (h, w, 3)        PIL's Image.open(file).convert("RGB") of a JPEG; of a PNG
                                           its shape (3,) int64; both with attr crc32 of those pixels

Usage: /usr/bin/python3 tools/make_image_prep_golden.py [--photo PATH] [--out tests/data/image_prep]
"""
import argparse
import os
import zlib

import h5py
import numpy as np
from PIL import Image


def center_crop_arr(pil_image, image_size):
    """facebookresearch/DiT train.py (ed81ce2), from ADM's guided_diffusion/image_datasets.py."""
    while min(*pil_image.size) >= 2 * image_size:
        pil_image = pil_image.resize(tuple(x // 2 for x in pil_image.size), resample=Image.BOX)
    scale = image_size / min(*pil_image.size)
    pil_image = pil_image.resize(tuple(round(x * scale) for x in pil_image.size), resample=Image.BICUBIC)
    arr = np.array(pil_image)
    crop_y = (arr.shape[0] - image_size) // 2
    crop_x = (arr.shape[1] - image_size) // 2
    return arr[crop_y: crop_y + image_size, crop_x: crop_x + image_size]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--photo", default="/usr/share/matplotlib/mpl-data/sample_data/grace_hopper.jpg")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "image_prep"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    photo = Image.open(args.photo).convert("RGB")  # 512 x 600
    rng = np.random.default_rng(0)

    def save(name, im, **kw):
        im.save(os.path.join(args.out, name), **kw)

    # Odd sizes everywhere: BOX halving of odd sides, half-way rounding of the bicubic size.
    save("photo_a.png", photo.crop((101, 60, 304, 217)))                       # 203 x 157
    save("photo_b.png", photo.crop((250, 180, 367, 481)))                      # 117 x 301 (tall)
    save("gray_c.png", photo.crop((200, 100, 290, 170)).convert("L"))          # 90 x 70
    rgba = np.dstack([np.array(photo.crop((0, 300, 33, 330))),
                      rng.integers(0, 256, (30, 33), dtype=np.uint8)])
    save("rgba_d.png", Image.fromarray(rgba, "RGBA"))                          # 33 x 30
    save("palette_e.png", photo.crop((300, 20, 361, 73)).quantize(colors=37))  # 61 x 53
    save("photo_f.jpg", photo.crop((150, 100, 310, 220)), quality=90)          # 160 x 120, 4:2:0
    save("gray_g.jpg", photo.crop((10, 10, 74, 58)).convert("L"), quality=90)  # 64 x 48
    save("cmyk.jpg", photo.crop((200, 200, 232, 224)).convert("CMYK"), quality=90)

    cases = [("photo_a.png", 32), ("photo_a.png", 64), ("photo_b.png", 48),
             ("gray_c.png", 96), ("rgba_d.png", 25), ("palette_e.png", 16), ("photo_f.jpg", 32),
             ("gray_g.jpg", 20), ("gray_g.jpg", 48)]
    with h5py.File(os.path.join(args.out, "image_prep_golden.h5"), "w", track_order=True) as f:
        f.attrs["source"] = "tools/make_image_prep_golden.py; PIL " + Image.__version__
        for name in sorted({c[0] for c in cases} | {"cmyk.jpg"}):
            rgb = np.array(Image.open(os.path.join(args.out, name)).convert("RGB"))
            if name.endswith(".jpg"):  # JPEG decoders differ: the pixels, to measure by how much
                d = f.create_dataset("decoded/" + name, data=rgb, compression="gzip", compression_opts=9)
            else:  # lossless: its size and checksum say it all
                d = f.create_dataset("decoded/" + name, data=np.array(rgb.shape, dtype=np.int64))
            d.attrs["crc32"] = zlib.crc32(rgb.tobytes())
        for name, size in cases:
            img = Image.open(os.path.join(args.out, name)).convert("RGB")
            d = f.create_dataset(f"crop/{name}_{size}", data=center_crop_arr(img, size), compression="gzip",
                                 compression_opts=9)
            d.attrs["file"], d.attrs["size"] = name, size
    print("wrote", args.out)


if __name__ == "__main__":
    main()

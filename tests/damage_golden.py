"""Copy a golden file and damage it, for the tests that expect verify to fail.

Usage: /usr/bin/python3 tests/damage_golden.py SRC DST DATASET [--index I]  (one value of DATASET
       moved by the dataset's L2 norm: a relative error near 1, far beyond any tolerance)
       /usr/bin/python3 tests/damage_golden.py SRC DST GROUP --drop-attr NAME
"""

import argparse
import os
import shutil

import h5py
import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("path", help="the dataset to change (or the group whose attribute to drop)")
    ap.add_argument("--index", type=int, default=0, help="flat index of the value to change")
    ap.add_argument("--drop-attr", help="drop this attribute of PATH instead")
    a = ap.parse_args()
    os.makedirs(os.path.dirname(os.path.abspath(a.dst)), exist_ok=True)
    shutil.copyfile(a.src, a.dst)
    with h5py.File(a.dst, "r+") as f:
        if a.drop_attr:
            del f[a.path].attrs[a.drop_attr]
            return
        d = f[a.path]
        v = np.array(d[()], dtype=np.float64)
        v.flat[a.index] += np.linalg.norm(v) + 1.0
        d[...] = v


if __name__ == "__main__":
    main()

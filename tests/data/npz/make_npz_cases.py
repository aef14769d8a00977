#!/usr/bin/env python3
"""Writes the small .npz files of tests/unit/test_eval_inception.cpp (the reader of FID reference
statistics, src/io/npz.cpp): mu (4,) and sigma (4, 4) with exactly representable values
mu[i] = 0.5 * i - 1.25, sigma[i, j] = 10 * (i + 1) + j + 0.5 (not symmetric, so element order is
checked), in the ways numpy writes them, plus broken ones. Run from anywhere; needs numpy.
"""
import os

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
mu = 0.5 * np.arange(4) - 1.25
sigma = 10.0 * (np.arange(4)[:, None] + 1) + np.arange(4)[None, :] + 0.5


def out(name):
    return os.path.join(here, name)


np.savez(out("stored_f8.npz"), mu=mu, sigma=sigma)
np.savez_compressed(out("deflated_f4.npz"), mu=mu.astype(np.float32), sigma=sigma.astype(np.float32))
np.savez(out("fortran_big_endian.npz"), mu=mu.astype(">f8"), sigma=np.asfortranarray(sigma.astype(">f4")))
np.savez(out("missing_sigma.npz"), mu=mu)
np.savez(out("wrong_shape.npz"), mu=mu, sigma=sigma[:, :3])
np.savez(out("integer_sigma.npz"), mu=mu, sigma=sigma.astype(np.int64))
bad = sigma.copy()
bad[2, 1] = np.nan
np.savez(out("nan_sigma.npz"), mu=mu, sigma=bad)
print("wrote the .npz cases to", here)

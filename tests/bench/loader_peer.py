#!/usr/bin/env python3
"""PyTorch DataLoader twin of `galley data bench` (tests/bench/loader_bench.sh).

Usage: loader_peer.py LAYOUT DATA_DIR --workers W --batch B --steps N [--mode read|full|synthetic]
                     [--ops numpy|torch]

The NERSC tutorial's "benchy" modes, as galley's bench has them:
  read       the Dataset reads each sample with h5py: no transform or normalisation
  full       read plus the layout's usual transform, as users write it: in numpy (--ops numpy,
             the default), or on torch tensors (--ops torch: torch's vectorised CPU kernels,
             one thread per worker)
  synthetic  the Dataset returns one preallocated sample: the DataLoader's own overhead
A torch.utils.data.DataLoader with W worker processes (h5py files opened once per worker, as
the tutorials advise), shuffle, default collate, batch B. Two warm-up batches (worker start-up)
are not timed; then N batches. Prints one JSON line: layout, mode, workers, batch, samples,
seconds, samples_per_s.

Layouts (the files loader_bench.sh writes with `galley data synth`, same names):
  cosmoflow  cosmo.h5: x int16 [n, 4, S, S, S], y [n, 4]; full: log1p (MLPerf CosmoFlow)
  deepcam    deepcam/*.h5 (or deepcam16/ for float16): one sample per file, climate/data
             (H, W, 16) channels-last, climate/labels_0 (H, W); full: (x - min) / (max - min)
             from stats.h5 (climate/minval, climate/maxval), then channels first (MLPerf DeepCAM)
  unet       nbody.h5: x [n, 4, L, L, L], y [n, 5, L, L, L]; every sample a random 64^3 crop of
             both read as h5py hyperslabs (SC22 tutorial); full = read (no transform)
  unetc      the same from nbody_contig.h5 (contiguous, as h5py writes by default)
  images     images.h5: x [n, 1, 28, 28] float32, y [n] labels; full: (x - 0.5) / 0.25
  era5       era5/train/<year>.h5, each `fields` [T, C, H, W] float32 (the SC23-SC25 tutorial's
             ERA5 layout): a sample is fields[t] and fields[t + 1] of one year, indexed and read
             as the tutorial's ERA5Dataset does (utils/data_loader.py: year = i // T, t wrapped
             to [1, T - 1), each year's file opened once per worker); full: (x - mean) / std per
             channel from era5/stats/global_{means,stds}.npy ([1, C, 1, 1]) on input and target
"""

import argparse
import glob
import json
import os
import time

import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

CROP = 64


class H5Set(Dataset):
    def __init__(self, layout, root, mode, ops="numpy"):
        self.layout, self.root, self.mode, self.ops = layout, root, mode, ops
        self.f = None  # opened in each worker on first use
        if layout == "era5":
            self.files = sorted(glob.glob(os.path.join(root, "era5", "train", "*.h5")))
            self.years = [None] * len(self.files)
            with h5py.File(self.files[0], "r") as f:
                self.per_year = f["fields"].shape[0]
            self.n = len(self.files) * self.per_year
            self.mean = np.load(os.path.join(root, "era5", "stats", "global_means.npy"))[0].astype(np.float32)
            self.std = np.load(os.path.join(root, "era5", "stats", "global_stds.npy"))[0].astype(np.float32)
            self.tmean, self.tstd = torch.from_numpy(self.mean), torch.from_numpy(self.std)
        elif layout.startswith("deepcam"):
            self.files = sorted(glob.glob(os.path.join(root, layout, "*.h5")))
            self.n = len(self.files)
            with h5py.File(os.path.join(root, "stats.h5"), "r") as s:
                lo = s["climate/minval"][...].astype(np.float32)
                hi = s["climate/maxval"][...].astype(np.float32)
            self.shift, self.scale = lo, (1.0 / (hi - lo)).astype(np.float32)
            self.tshift, self.tscale = torch.from_numpy(self.shift), torch.from_numpy(self.scale)
        else:
            name = {"cosmoflow": "cosmo.h5", "unet": "nbody.h5", "unetc": "nbody_contig.h5", "images": "images.h5"}[layout]
            self.path = os.path.join(root, name)
            with h5py.File(self.path, "r") as f:
                self.n = f["x"].shape[0]
                self.shape = f["x"].shape
        self.fake = None

    def __len__(self):
        return self.n

    def _read(self, i):
        if self.layout == "era5":
            y, t = i // self.per_year, i % self.per_year
            t = t % (self.per_year - 1)
            if t < 1:
                t += 1
            if self.years[y] is None:
                self.years[y] = h5py.File(self.files[y], "r")["fields"]
            return self.years[y][t], self.years[y][t + 1]
        if self.layout.startswith("deepcam"):
            with h5py.File(self.files[i], "r") as f:
                return f["climate/data"][...], f["climate/labels_0"][...]
        if self.f is None:
            self.f = h5py.File(self.path, "r")
        if self.layout.startswith("unet"):
            L = self.shape[2]
            o = np.random.randint(0, L - CROP + 1, size=3)
            sl = (i, slice(None), slice(o[0], o[0] + CROP), slice(o[1], o[1] + CROP), slice(o[2], o[2] + CROP))
            return self.f["x"][sl], self.f["y"][sl]
        return self.f["x"][i], self.f["y"][i]

    def __getitem__(self, i):
        if self.mode == "synthetic":
            if self.fake is None:
                x, y = self._read(0)
                self.fake = (torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)), torch.from_numpy(np.asarray(y)))
            return self.fake
        x, y = self._read(i)
        if self.mode == "read":
            return torch.from_numpy(x), torch.from_numpy(np.asarray(y))
        if self.layout == "era5":  # input and target normalised alike
            if self.ops == "torch":
                return (torch.from_numpy(x) - self.tmean) / self.tstd, (torch.from_numpy(y) - self.tmean) / self.tstd
            x -= self.mean
            x /= self.std
            y -= self.mean
            y /= self.std
            return torch.as_tensor(x), torch.as_tensor(y)
        if self.ops == "torch":
            t = torch.from_numpy(x).float()
            if self.layout == "cosmoflow":
                t = t.log1p_()
            elif self.layout.startswith("deepcam"):
                t = ((t - self.tshift) * self.tscale).permute(2, 0, 1).contiguous()
            elif self.layout == "images":
                t = (t - 0.5) * 4.0
            return t, torch.from_numpy(np.asarray(y))
        if self.layout == "cosmoflow":
            x = np.log1p(x.astype(np.float32))
        elif self.layout.startswith("deepcam"):
            x = (x.astype(np.float32) - self.shift) * self.scale
            x = np.ascontiguousarray(np.transpose(x, (2, 0, 1)))
        elif self.layout == "images":
            x = (x - np.float32(0.5)) * np.float32(4.0)
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)), torch.from_numpy(np.asarray(y))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("layout", choices=["cosmoflow", "deepcam", "deepcam16", "unet", "unetc", "images", "era5"])
    ap.add_argument("root")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--mode", default="full", choices=["read", "full", "synthetic"])
    ap.add_argument("--ops", default="numpy", choices=["numpy", "torch"])
    a = ap.parse_args()
    torch.set_num_threads(1)
    ds = H5Set(a.layout, a.root, a.mode, a.ops)
    dl = DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers, drop_last=True,
                    persistent_workers=a.workers > 0)
    it = iter(dl)
    warm, samples, done = 2, 0, 0
    t0 = None
    while done < a.steps + warm:
        try:
            x, _ = next(it)
        except StopIteration:
            it = iter(dl)
            continue
        done += 1
        if done == warm:
            t0 = time.perf_counter()
        elif done > warm:
            samples += x.shape[0]
    dt = time.perf_counter() - t0
    print(json.dumps({"layout": a.layout, "mode": a.mode, "ops": a.ops, "workers": a.workers, "batch": a.batch, "samples": samples,
                      "seconds": round(dt, 3), "samples_per_s": round(samples / dt, 1)}))


if __name__ == "__main__":
    main()

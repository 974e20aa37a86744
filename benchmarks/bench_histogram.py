"""Speed of the histogram-task training loop (sequences per second for one epoch).

    python benchmarks/bench_histogram.py [--epochs 1] [--n-sequences 50000]

Prints, for one training epoch over the 35 000 training sequences (Adam, batch 32):
* float32, BLAS pinned to 1 thread (what `theory histogram train` uses);
* float64, 1 thread;
* float32 with the default BLAS thread count (multi-threaded BLAS on 320 x 64 matrices);
* a per-sequence baseline: the same numpy code called with batch size 1 and the gradients of
  the 32 sequences summed (no vectorisation over the batch), on a 1/20 slice of the epoch;
plus the evaluation pass (train + validation) done after every epoch, and the projected time of
a 200-epoch run.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from theory import histogram as H


def epoch_time(data, dtype, threads, n_seq=None, per_sequence=False):
    theta = H.init_params(0, dtype=dtype)
    opt = H.Adam(H.N_PARAMS, dtype=dtype)
    f = H.qk_mask("semantic").astype(dtype)
    xs, ys = data.x_train, data.y_train
    n = len(xs) if n_seq is None else n_seq
    with H.blas_threads(threads):
        t0 = time.perf_counter()
        for s in range(0, n, 32):
            xb, yb = xs[s : s + 32], ys[s : s + 32]
            if per_sequence:
                g = np.zeros_like(theta)
                for k in range(len(xb)):
                    _, gk = H.loss_and_grad(theta, xb[k : k + 1], yb[k : k + 1], f=f)
                    g += gk
                g /= len(xb)
            else:
                _, g = H.loss_and_grad(theta, xb, yb, f=f)
            opt.step(theta, g)
        dt = time.perf_counter() - t0
    return n / dt, dt


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-sequences", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=2, help="best of this many epochs")
    ap.add_argument(
        "--no-threaded",
        action="store_true",
        help="skip the default-BLAS-threads case (its spinning threads slow "
        "everything else on a shared machine)",
    )
    args = ap.parse_args()
    data = H.make_data(args.n_sequences, rng=0)
    n_train = len(data.x_train)
    print(f"histogram task: {n_train} training sequences, batch 32, Adam, {H.N_PARAMS} parameters")

    def best(**kw):
        runs = [epoch_time(data, **kw) for _ in range(args.repeat)]
        return max(r[0] for r in runs)

    rows = []
    r32 = best(dtype=np.float32, threads=1)
    rows.append(("float32, 1 BLAS thread (default)", r32))
    rows.append(("float64, 1 BLAS thread", best(dtype=np.float64, threads=1)))
    if not args.no_threaded:
        rows.append(("float32, default BLAS threads", best(dtype=np.float32, threads=None)))
    n_slice = max(32, (n_train // 20) // 32 * 32)
    rows.append(
        (
            "per-sequence baseline (float32, 1 thread)",
            max(
                epoch_time(data, np.float32, 1, n_seq=n_slice, per_sequence=True)[0]
                for _ in range(args.repeat)
            ),
        )
    )
    for name, rate in rows:
        print(
            f"  {name:45s} {rate:10.0f} seq/s   epoch {n_train / rate:7.2f} s   "
            f"ratio to default {rate / r32:6.2f}"
        )
    theta = H.init_params(0)
    with H.blas_threads(1):
        t0 = time.perf_counter()
        H.evaluate(theta, data.x_train, data.y_train)
        H.evaluate(theta, data.x_val, data.y_val)
        t_eval = time.perf_counter() - t0
    per_epoch = n_train / r32 + t_eval
    print(
        f"  evaluation after each epoch (train + val, {len(data.x_train) + len(data.x_val)} "
        f"sequences): {t_eval:.2f} s"
    )
    print(
        f"  projected 200-epoch run: {200 * per_epoch / 60:.1f} min "
        f"({per_epoch:.2f} s per epoch incl. evaluation)"
    )


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""create/stat/unlink of N files split over P processes, each in its own directory.

Usage: mdops.py DIR TOTAL_FILES PROCESSES
Prints one line per phase: `phase ops seconds ops_per_second`.
"""
import multiprocessing as mp
import os
import sys
import time


def work(args):
    phase, base, rank, count, barrier = args
    d = os.path.join(base, f"p{rank}")
    barrier.wait()
    if phase == "create":
        for i in range(count):
            fd = os.open(os.path.join(d, f"f{i}"), os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
            os.close(fd)
    elif phase == "stat":
        for i in range(count):
            os.stat(os.path.join(d, f"f{i}"))
    elif phase == "unlink":
        for i in range(count):
            os.unlink(os.path.join(d, f"f{i}"))


def main():
    base, total, procs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    per = total // procs
    for r in range(procs):
        os.makedirs(os.path.join(base, f"p{r}"), exist_ok=True)
    for phase in ("create", "stat", "unlink"):
        mgr = mp.Manager()
        barrier = mgr.Barrier(procs + 1)
        with mp.Pool(procs) as pool:
            res = pool.map_async(work, [(phase, base, r, per, barrier) for r in range(procs)])
            barrier.wait()
            t0 = time.monotonic()
            res.get()
            dt = time.monotonic() - t0
        print(f"{phase} {per * procs} {dt:.3f} {per * procs / dt:.0f}", flush=True)
    for r in range(procs):
        os.rmdir(os.path.join(base, f"p{r}"))


if __name__ == "__main__":
    main()

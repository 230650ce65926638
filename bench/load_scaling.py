#!/usr/bin/env python3
"""Time to `/health` 200 and peak RSS of `mla serve` for each model file given, from a cold page
cache: the load's rate against the disk's. For each file: drop the page cache (root only; the table
says when it could not), start `mla serve`, poll /health every 50 ms, read VmHWM / RssAnon / RssFile
from /proc/PID/status at the first 200, stop the server.

    bench/load_scaling.py --mla build/mla FILE... [--serve-arg=--weights-memory --serve-arg=12G]

Prints a markdown table: file size, seconds to 200, load rate (file bytes / seconds), peak RSS and
its ratio to the file.
"""
import argparse
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def status_kib(pid: int) -> dict:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmHWM", "RssAnon", "RssFile"):
                out[k] = int(v.split()[0])
    return out


def measure(mla: str, path: str, serve_args: list, timeout: float) -> dict:
    cold = drop_caches()
    port = free_port()
    cmd = [mla, "serve", "-m", path, "--host", "127.0.0.1", "--port", str(port), *serve_args]
    # The server's log goes to a file: a pipe nobody reads would fill and stop it.
    with tempfile.TemporaryFile(mode="w+") as log:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, text=True)
        try:
            seconds = wait_healthy(proc, port, t0, timeout, log, path)
            mem = status_kib(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return {"seconds": seconds, "cold": cold, **mem}


def wait_healthy(proc, port: int, t0: float, timeout: float, log, path: str) -> float:
    while True:
        if proc.poll() is not None:
            log.seek(0)
            raise SystemExit(f"mla serve exited with {proc.returncode} on {path}:\n{log.read()[-2000:]}")
        if time.monotonic() - t0 > timeout:
            raise SystemExit(f"{path}: /health did not answer 200 within {timeout} s")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return time.monotonic() - t0
        except OSError:
            pass
        time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--mla", default="build/mla")
    ap.add_argument("--serve-arg", action="append", default=[], help="one argument for mla serve (repeatable)")
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args()
    print("| file | size GB | cold cache | s to /health 200 | load GB/s | peak RSS GB (VmHWM) | anon GB | file GB "
          "| RSS / file |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for path in args.files:
        size = os.path.getsize(path)
        m = measure(args.mla, path, args.serve_arg, args.timeout)
        gb = 1e9
        print(f"| {os.path.basename(path)} | {size / gb:.2f} | {'yes' if m['cold'] else 'NO (not root)'} "
              f"| {m['seconds']:.1f} | {size / gb / m['seconds']:.2f} | {m['VmHWM'] * 1024 / gb:.2f} "
              f"| {m['RssAnon'] * 1024 / gb:.2f} | {m['RssFile'] * 1024 / gb:.2f} | {m['VmHWM'] * 1024 / size:.3f} |",
              flush=True)


if __name__ == "__main__":
    main()

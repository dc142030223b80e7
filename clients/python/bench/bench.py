#!/usr/bin/env python3
"""Claim + release on an open session: the Python client beside the Go
client, against one `baton serve` in the same run.

    go build -o /tmp/baton ./cmd/baton
    python3 clients/python/bench/bench.py --bin /tmp/baton

Rounds alternate between the clients so that both see the same machine;
the medians are printed as a Markdown table (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

import baton  # noqa: E402


def start_server(bin_path: str):
    p = subprocess.Popen([bin_path, "serve", "-listen", "127.0.0.1:0", "-log-format", "json"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert p.stderr is not None
    for line in p.stderr:
        if '"baton listening"' in line:
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, json.loads(line)["addr"]
    raise SystemExit("baton serve did not start")


def python_round(addr: str, n: int, wait: bool) -> float:
    c = baton.Client(addr, lease=60)
    with c.session() as s:
        for _ in range(200):  # warm-up
            s.claim("bench-py").release(wait=wait)
        t0 = time.perf_counter()
        for _ in range(n):
            s.claim("bench-py").release(wait=wait)
        return (time.perf_counter() - t0) / n * 1e6


def go_round(goclient: str, addr: str, n: int) -> float:
    out = subprocess.run([goclient, "-addr", addr, "-n", str(n)], check=True, capture_output=True,
                         text=True, timeout=300).stdout
    return json.loads(out)["us_per_op"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.environ.get("BATON_BIN", ""), help="baton binary")
    ap.add_argument("-n", type=int, default=2000, help="pairs per round")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if not a.bin:
        raise SystemExit("--bin (or BATON_BIN) is required")
    tmp = tempfile.mkdtemp()
    goclient = os.path.join(tmp, "goclient")
    subprocess.run(["go", "build", "-o", goclient, "./goclient"], cwd=HERE, check=True, timeout=600)
    srv, addr = start_server(a.bin)
    res = {"Go client (Release does not wait)": [], "Python, release(wait=False)": [],
           "Python, release() waits for RELEASED": []}
    try:
        for _ in range(a.rounds):
            res["Go client (Release does not wait)"].append(go_round(goclient, addr, a.n))
            res["Python, release(wait=False)"].append(python_round(addr, a.n, False))
            res["Python, release() waits for RELEASED"].append(python_round(addr, a.n, True))
    finally:
        srv.kill()
        srv.wait()
    print("| client | µs per claim + release (median of %d rounds of %d) | rounds |" % (a.rounds, a.n))
    print("|---|---|---|")
    for k, v in res.items():
        print("| %s | %.1f | %s |" % (k, statistics.median(v), ", ".join("%.1f" % x for x in v)))
    print("Python %s, %s" % (sys.version.split()[0], sys.platform))


if __name__ == "__main__":
    main()

"""The Scrapy middleware at its defaults against one polite IP (make bench-scrapy).

Builds the operator and the crawl farm, starts the operator with its demo fleet (3 mock proxies,
each leaving from its own 127.x address) and the farm's strict site (1 request a second per
source IP, burst 3, 429 with Retry-After 2 beyond it, a ban for an IP that keeps going), then
crawls PAGES pages twice, each on a fresh farm: through the middleware at its defaults, and
straight to the site with Scrapy's DOWNLOAD_DELAY of 1.05 s (one polite IP, the baseline).
Prints both runs and the speed-up; exits 1 when a page is missing or a 403 was answered.

    python3 clients/python/tests/bench_scrapy.py [PAGES]   (default 51)
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from conftest import REPO, build_operator, free_port, go_build, wait_until

TOKEN = "bench-scrapy-token-0f3a"
CRAWL = str(Path(__file__).with_name("crawl.py"))


def farm(binary):
    proc = subprocess.Popen([binary, "-sites", "1", "-strict", "1"], stdout=subprocess.PIPE, text=True, cwd=REPO)
    first = proc.stdout.readline().split()
    assert len(first) >= 2 and first[1].startswith("http://"), first
    return proc, first[1]


def run(farm_bin, tmp, name, args, pages):
    proc, base = farm(farm_bin)
    out = Path(tmp) / f"{name}.json"
    try:
        res = subprocess.run([sys.executable, CRAWL, *args[:2], str(out), args[2], base, str(pages), *args[3:]],
                             capture_output=True, text=True, timeout=900)
        if res.returncode != 0:
            sys.exit(f"{name}: crawl failed:\n{res.stderr[-4000:]}")
    finally:
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    site = json.loads(rest)["Sites"][0]
    result = json.loads(out.read_text())
    ok = sum(1 for i in result["items"] if i["status"] == 200)
    return {"run": name, "pages": ok, "of": pages, "seconds": round(result["seconds"], 1),
            "429": site["Limited"], "403": site["Refused"], "bans": site["Bans"]}


def main():
    pages = int(sys.argv[1]) if len(sys.argv) > 1 else 51
    tmp = tempfile.mkdtemp(prefix="bench-scrapy-")
    binary = build_operator(tmp)
    farm_bin = go_build("./test/crawlfarm/cmd/crawlfarm", os.path.join(tmp, "crawlfarm"))
    hook, api = free_port(), free_port()
    op = subprocess.Popen([binary, "-hook-addr", f"127.0.0.1:{hook}", "-hooks-insecure", "-discovery-addr",
                           f"127.0.0.1:{api}", "-demo-proxies", "3", "-demo-site-addr", "", "-fleet-warmup", "0s",
                           "-log-format", "text"], stdout=open(os.path.join(tmp, "operator.log"), "w"),
                          stderr=subprocess.STDOUT, env=dict(os.environ, DISCOVERY_TOKEN=TOKEN, KUBECONFIG=""))
    try:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        wait_until("3 healthy demo proxies", lambda: requests.get(f"http://127.0.0.1:{api}/v1/proxies?healthy=true",
                                                                  headers=auth, timeout=2).json()["count"] == 3, 120)
        rows = [run(farm_bin, tmp, "middleware, defaults, 3 proxies",
                    [f"http://127.0.0.1:{api}", TOKEN, "pages", json.dumps({"demo": "true"})], pages),
                run(farm_bin, tmp, "one polite IP, DOWNLOAD_DELAY 1.05", ["-", "-", "direct", "1.05"], pages)]
    finally:
        op.terminate()
        op.wait(timeout=30)
    load = os.getloadavg()
    for r in rows:
        print(json.dumps(r))
    speedup = rows[1]["seconds"] / rows[0]["seconds"]
    print(f"speed-up {speedup:.2f}x (load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f})")
    bad = [r for r in rows if r["pages"] != pages or r["403"]]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

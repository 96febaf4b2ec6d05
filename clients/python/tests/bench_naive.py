"""Naive crawlers through the gateway on a rate-limited site, with the real clients (make bench-naive).

Issue 31's question, asked with the clients' own habits: a curl loop with no delay, Python
requests in 4 threads at full speed, and Scrapy with its default settings pointed at the
gateway by http_proxy. Each crawls SECONDS x proxies pages of the crawl farm's rate-limited site (1 request
a second per source IP, burst 1, 429 with Retry-After 2 beyond it, a 60 s ban for an IP that
sends a 6th request while told to wait) through a fresh operator whose demo fleet has 3, then
16, mock proxies (each leaving from its own 127.x address), on a fresh farm each time.
Ideal time = pages / (proxies x 1 request/s) = SECONDS for 3 and for 16 proxies alike (a crawl of a
few seconds would measure the operator's first half second, not its pace); Scrapy's time is its crawl's own (from its engine's start),
not Python's start-up. Prints a Markdown table; exits 1 when a page is
missing or the site answered a 403.

    python3 clients/python/tests/bench_naive.py [SECONDS]   (default 17: 51 and 272 pages; about 4 minutes)
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from conftest import REPO, build_operator, free_port, go_build, wait_until

TOKEN = "bench-naive-token-7c1e"
CRAWL = str(Path(__file__).with_name("crawl.py"))


def curl_loop(proxy, base, pages):
    """for i in ...; do curl -x PROXY URL; done: one request at a time, no delay, no retry."""
    ok = 0
    for i in range(pages):
        res = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "300",
                              "-x", proxy, f"{base}page/{i}"], capture_output=True, text=True)
        ok += res.stdout.strip() == "200"
    return ok


def requests_threads(proxy, base, pages):
    """requests in 4 threads at full speed, proxies= the gateway, no retry."""
    proxies = {"http": proxy, "https": proxy}

    def one(i):
        try:
            return requests.get(f"{base}page/{i}", proxies=proxies, timeout=300).status_code == 200
        except requests.RequestException:
            return False

    with ThreadPoolExecutor(4) as pool:
        return sum(pool.map(one, range(pages)))


def scrapy_defaults(proxy, base, pages, tmp):
    """Scrapy's default settings, the gateway from http_proxy, no middleware of ours."""
    out = Path(tmp) / "scrapy.json"
    env = dict(os.environ, http_proxy=proxy, https_proxy=proxy)
    res = subprocess.run([sys.executable, CRAWL, "-", "-", str(out), "proxy", base, str(pages)],
                         capture_output=True, text=True, timeout=900, env=env)
    if res.returncode != 0:
        sys.exit(f"scrapy: crawl failed:\n{res.stderr[-4000:]}")
    result = json.loads(out.read_text())
    # The crawl's own time (Scrapy's engine from start to finish), not Python's start-up.
    return sum(1 for i in result["items"] if i["status"] == 200), result["seconds"]


CLIENTS = [("curl loop, no delay", curl_loop), ("requests, 4 threads", requests_threads),
           ("Scrapy defaults, http_proxy", scrapy_defaults)]


def start_operator(binary, tmp, proxies):
    hook, api, gw = free_port(), free_port(), free_port()
    log = open(os.path.join(tmp, f"operator-{proxies}.log"), "a")
    op = subprocess.Popen([binary, "-hook-addr", f"127.0.0.1:{hook}", "-hooks-insecure", "-discovery-addr",
                           f"127.0.0.1:{api}", "-gateway-addr", f"127.0.0.1:{gw}",
                           # The farm's sites live on 127.0.10.x: a laptop's crawl target.
                           "-gateway-allow-target-cidrs", "127.0.10.0/24",
                           "-demo-proxies", str(proxies), "-demo-site-addr", "", "-fleet-warmup", "0s",
                           "-log-format", "text"], stdout=log, stderr=subprocess.STDOUT,
                          env=dict(os.environ, DISCOVERY_TOKEN=TOKEN, KUBECONFIG=""))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    wait_until(f"{proxies} healthy demo proxies",
               lambda: requests.get(f"http://127.0.0.1:{api}/v1/proxies?healthy=true", headers=auth,
                                    timeout=2).json()["count"] == proxies, 120)
    return op, f"http://any:{TOKEN}@127.0.0.1:{gw}"


def main():
    seconds = int(sys.argv[1]) if len(sys.argv) > 1 else 17
    tmp = tempfile.mkdtemp(prefix="bench-naive-")
    binary = build_operator(tmp)
    farm_bin = go_build("./test/crawlfarm/cmd/crawlfarm", os.path.join(tmp, "crawlfarm"))
    rows = []
    for proxies in (3, 16):
        pages = seconds * proxies
        for name, crawl in CLIENTS:
            # A fresh operator and farm per run: nothing learned or banned carries over.
            op, proxy = start_operator(binary, tmp, proxies)
            farm = subprocess.Popen([farm_bin, "-sites", "1", "-strict", "0", "-rate-limited"], stdout=subprocess.PIPE,
                                    text=True, cwd=REPO)
            try:
                first = farm.stdout.readline().split()
                assert len(first) >= 2 and first[1].startswith("http://"), first
                base = first[1]
                start = time.monotonic()
                args = (proxy, base, pages, tmp) if crawl is scrapy_defaults else (proxy, base, pages)
                got = crawl(*args)
                secs = time.monotonic() - start
                if isinstance(got, tuple):
                    got, secs = got
            finally:
                farm.send_signal(signal.SIGINT)
                rest, _ = farm.communicate(timeout=60)
                op.terminate()
                op.wait(timeout=30)
            site = json.loads(rest)["Sites"][0]
            ideal = pages / proxies
            rows.append({"proxies": proxies, "client": name, "got": got, "pages": pages, "429": site["Limited"],
                         "403": site["Refused"], "bans": site["Bans"], "seconds": secs, "ideal": ideal})
            print(json.dumps(rows[-1]), flush=True)
    load = os.getloadavg()
    print(f"\nload average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n")
    print("| proxies | client | pages | 429s | 403s | time | ideal | ratio |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['proxies']} | {r['client']} | {r['got']}/{r['pages']} | {r['429']} | {r['403']} | "
              f"{r['seconds']:.1f} s | {r['ideal']:.1f} s | {r['seconds'] / r['ideal']:.2f}x |")
    bad = [r for r in rows if r["got"] != r["pages"] or r["403"]]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

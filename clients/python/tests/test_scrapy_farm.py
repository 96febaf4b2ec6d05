"""Real Scrapy through the real operator against the crawl farm's strict site (1 request a
second per source IP, burst 3, 429 with Retry-After 2 s beyond it, a ban for an IP that keeps
going while told to wait), the middleware at its defaults (4 leases per target, a learned
pace per proxy) with Scrapy's default concurrency: every page must be fetched, none refused,
nobody banned, and the site's pages spread over both proxies."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from conftest import REPO, go_build

PAGES = 30
# The crawl farm's command (test/crawlfarm: the benchmark's sites, rate limits and bans).
FARM_CMD = "./test/crawlfarm/cmd/crawlfarm"


def test_strict_site_every_page_no_ban(operator, tmp_path):
    farm_bin = go_build(FARM_CMD, str(tmp_path / "crawlfarm"))
    farm = subprocess.Popen([farm_bin, "-sites", "1", "-strict", "1"], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        # "site-01 http://127.0.10.1:PORT/  rps=1 ..." once it listens.
        first = farm.stdout.readline().split()
        assert len(first) >= 2 and first[1].startswith("http://"), first
        base = first[1]
        out = tmp_path / "crawl.json"
        try:
            res = subprocess.run([sys.executable, str(Path(__file__).with_name("crawl.py")), operator.api_url,
                                  operator.token, str(out), "pages", base, str(PAGES)],
                                 capture_output=True, text=True, timeout=int(os.environ.get("FARM_CRAWL_TIMEOUT", "600")))
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"crawl did not end:\n{(exc.stderr or b'')[-6000:]!r}") from None
        assert res.returncode == 0, f"crawl failed:\n{res.stdout}\n{res.stderr[-6000:]}"
        result = json.loads(out.read_text())
    finally:
        farm.send_signal(signal.SIGINT)
        rest, _ = farm.communicate(timeout=60)
    site = json.loads(rest)["Sites"][0]

    items, stats = result["items"], result["stats"]
    fetched = sorted(i["url"] for i in items if i["status"] == 200)
    assert fetched == sorted(f"{base.rstrip('/')}/page/{n}" for n in range(PAGES)), (items, stats)
    assert site["Served"] == PAGES, site
    assert site["Bans"] == 0 and site["Refused"] == 0 and not site["BannedNow"], site
    assert not stats.get("proxy_operator/gave_up"), stats
    # Both proxies carried pages: one site is spread over several leases, each paced.
    assert len({i["proxy"] for i in items}) == 2, items
    assert stats.get("proxy_operator/leases", 0) >= 2, stats
    # Every 429 the site answered was reported (the pace learns from them), none ended in a ban.
    assert stats.get("proxy_operator/reports/rate_limited", 0) <= site["Limited"], (site, stats)

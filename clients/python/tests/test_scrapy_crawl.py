"""A real Scrapy crawl through the real operator: one proxy is rate-limited by the site."""

import json
import os
import subprocess
import sys
from pathlib import Path

import requests

from proxy_operator import NoMatch
from local_site import Site


def reports_total(op, result):
    text = requests.get(op.hook_url + "/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith(f'proxy_operator_lease_reports_total{{result="{result}",source="api"}}'):
            return float(line.split()[-1])
    raise AssertionError(f"no reports_total for {result} in /metrics")


def test_crawl_rotates_away_from_a_rate_limited_proxy(operator, tmp_path):
    before = reports_total(operator, "rate_limited")
    with Site(retry_after=120) as site:
        out = tmp_path / "crawl.json"
        res = subprocess.run([sys.executable, str(Path(__file__).with_name("crawl.py")), operator.api_url,
                              operator.token, str(out), "site", site.url + "/"],
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, f"crawl failed:\n{res.stdout}\n{res.stderr[-6000:]}"
        result = json.loads(out.read_text())

    items, stats = result["items"], result["stats"]
    # Every page was fetched, with a 200, and none through the rate-limited proxy.
    fetched = sorted({i["url"].split(site.url, 1)[1] for i in items if i["status"] == 200})
    assert fetched == sorted(site.all_paths()), (fetched, res.stderr[-3000:])
    assert all(i["status"] == 200 for i in items), items
    assert site.banned_ip is not None and site.refused, "the site never refused anyone"
    assert site.banned_ip not in set(site.served.values()), site.served

    # The ban was reported, once, through the real API.
    assert stats.get("proxy_operator/reports/rate_limited") == 1, stats
    assert stats.get("proxy_operator/retries", 0) >= 1, stats
    assert reports_total(operator, "rate_limited") == before + 1

    # The reported proxy cools down for that site only.
    with operator.api() as api:
        listing = api.list_proxies(pool="scrapy")
        by_ip = {p["ip"]: p for p in listing["proxies"]}
        banned = by_ip[site.banned_ip]
        name = banned["attributes"]["name"]
        try:
            api.lease(selector={"name": name}, target=site.host, ttl_seconds=5, wait=0)
            raise AssertionError("the rate-limited proxy was leased again for the same site")
        except NoMatch as exc:
            assert exc.matching == 1 and exc.cooling_for_target == 1, exc.body
        other_site = api.lease(selector={"name": name}, target="other.example", ttl_seconds=5)
        assert other_site.proxy["ip"] == site.banned_ip
        api.release(other_site.lease_id)
        # Every lease the crawl held was released when the spider closed.
        assert all(p["activeLeases"] == 0 for p in api.list_proxies(pool="scrapy")["proxies"])
    assert stats.get("proxy_operator/released", 0) >= stats.get("proxy_operator/leases", 0), stats


def test_lease_is_renewed_before_it_expires(operator, tmp_path):
    """A crawl longer than the lease's TTL: the site answers each page after 0.5 s, one at a
    time, 13 pages, against a 4 s lease renewed when 2 s are left. Without renewal the lease
    would be gone mid-crawl."""
    with Site(refuse_first=False, delay=0.5) as site:
        out = tmp_path / "crawl.json"
        res = subprocess.run([sys.executable, str(Path(__file__).with_name("crawl.py")), operator.api_url,
                              operator.token, str(out), "site", site.url + "/", "4", "2", "1"],
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, f"crawl failed:\n{res.stdout}\n{res.stderr[-6000:]}"
        result = json.loads(out.read_text())
    stats = result["stats"]
    fetched = sorted({i["url"].split(site.url, 1)[1] for i in result["items"] if i["status"] == 200})
    assert fetched == sorted(site.all_paths())
    assert stats.get("proxy_operator/renewals", 0) >= 1, stats
    assert stats.get("proxy_operator/released", 0) >= stats.get("proxy_operator/leases", 0), stats

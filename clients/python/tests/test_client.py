"""The client against the real operator, and the credential path through a real mock proxy."""

import time

import requests

from proxy_operator import APIError, Client, NoMatch
from proxy_operator.client import parse_retry_after


def test_lease_credentials_only_in_the_lease(operator):
    with operator.api() as api:
        listing = api.list_proxies(healthy=True, pool="scrapy")
        assert listing["complete"] is True and listing["count"] == 2
        for p in listing["proxies"]:
            assert not {"username", "password", "proxyURL"} & set(p), p
        lease = api.lease(selector={"pool": "scrapy"}, ttl_seconds=60)
        try:
            assert lease.username and lease.password
            assert lease.proxy_url == f"http://{lease.username}:{lease.password}@{lease.address}"
            assert lease.password not in repr(lease)
            # Through the proxy: 407 without the credential, 200 with the lease's proxyURL.
            target = operator.hook_url + "/healthz"
            bare = requests.get(target, proxies={"http": f"http://{lease.address}"}, timeout=10)
            assert bare.status_code == 407
            assert bare.headers.get("Proxy-Authenticate", "").startswith("Basic")
            ok = requests.get(target, proxies={"http": lease.proxy_url}, timeout=10)
            assert ok.status_code == 200 and ok.json() == {"status": "ok"}

            renewed = api.renew(lease.lease_id, ttl_seconds=120)
            assert renewed.lease_id == lease.lease_id and renewed.ttl_seconds == 120
            assert renewed.proxy_url == lease.proxy_url
            report = api.report(lease.lease_id, "ok", "example.com")
            assert report["result"] == "ok"
        finally:
            api.release(lease.lease_id)
        api.release(lease.lease_id)  # idempotent
        try:
            api.renew(lease.lease_id)
            raise AssertionError("renewed a released lease")
        except APIError as exc:
            assert exc.status == 404


def test_errors(operator):
    with Client(operator.api_url, token="wrong") as bad:
        try:
            bad.list_proxies()
            raise AssertionError("a wrong token was accepted")
        except APIError as exc:
            assert exc.status == 401
    with operator.api() as api:
        try:
            api.lease(selector={"pool": "nowhere"}, wait=0)
            raise AssertionError("leased from an empty selection")
        except NoMatch as exc:
            assert exc.status == 409 and exc.matching == 0
        try:
            api.lease(ttl_seconds=999999)
            raise AssertionError("an out-of-range TTL was accepted")
        except APIError as exc:
            assert exc.status == 400 and "ttlSeconds" in exc.message


def test_parse_retry_after():
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412480 - 60) == 60.0


def test_lease_waits_for_a_cooldown(operator):
    """One proxy cools down for a site for 2 s: a lease with a shorter wait gets NoMatch at
    once, saying when the proxy frees up; one with the default wait sleeps the 409's
    Retry-After and gets it."""
    target = "cooldown-wait.example"
    with operator.api() as api:
        held = api.lease(selector={"name": "alpha"}, target=target, ttl_seconds=30)
        api.report(held.lease_id, "rate_limited", target, retry_after_seconds=2)
        api.release(held.lease_id)
        try:
            api.lease(selector={"name": "alpha"}, target=target, ttl_seconds=30, wait=0.5)
            raise AssertionError("leased a proxy cooling down for the target")
        except NoMatch as exc:
            assert exc.cooling_for_target == 1 and exc.available_at is not None, exc.body
            assert exc.retry_after in (1.0, 2.0) and exc.body["retryAfterSeconds"] == exc.retry_after, exc.body
    sleeps = []

    def sleep(d):
        sleeps.append(d)
        time.sleep(d)

    with Client(operator.api_url, token=operator.token, sleep=sleep) as api:
        assert api.lease_wait == 60.0
        lease = api.lease(selector={"name": "alpha"}, target=target, ttl_seconds=30)
        api.release(lease.lease_id)
    assert lease.proxy["attributes"]["name"] == "alpha"
    assert sleeps and all(0 < s <= 2 for s in sleeps), sleeps


def test_list_proxies_follows_every_page():
    """The server pages its list (500 a page, ``continue`` for the next): the client walks
    every page and answers one list. Against a stand-in that pages by 2."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import parse_qs, urlparse

    ids = [f"crawl/p{i}" for i in range(5)]
    seen = []

    class Pages(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            q = parse_qs(urlparse(self.path).query)
            seen.append(q)
            start = int(q["continue"][0]) if "continue" in q else 0
            page = {"complete": True, "count": len(ids[start:start + 2]),
                    "proxies": [{"id": i} for i in ids[start:start + 2]]}
            if start + 2 < len(ids):
                page["continue"] = str(start + 2)
            body = json.dumps(page).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        api = Client(f"http://127.0.0.1:{srv.server_address[1]}", token="t" * 16)
        listing = api.list_proxies(healthy=True, geo="eu")
        assert [p["id"] for p in listing["proxies"]] == ids and listing["count"] == 5
        assert len(seen) == 3 and all(q["attr.geo"] == ["eu"] and q["healthy"] == ["true"] for q in seen)
    finally:
        srv.shutdown()
        srv.server_close()

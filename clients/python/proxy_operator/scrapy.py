"""A Scrapy downloader middleware that crawls every target domain through a leased proxy.

Enable it before Scrapy's HttpProxyMiddleware (750), which turns the credentials in
``request.meta["proxy"]`` into a Proxy-Authorization header::

    DOWNLOADER_MIDDLEWARES = {"proxy_operator.scrapy.ProxyOperatorMiddleware": 745}
    PROXY_OPERATOR_URL = "http://127.0.0.1:8090"
    PROXY_OPERATOR_TOKEN = "..."                      # the discovery API's bearer token
    PROXY_OPERATOR_SELECTOR = {"geo": "eu"}           # attributes the proxies must have
    PROXY_OPERATOR_TTL = 300                          # lease length, seconds
    PROXY_OPERATOR_RENEW_MARGIN = 60                  # renew when fewer seconds are left
    PROXY_OPERATOR_BANNED_CODES = [403]               # reported as "banned"
    PROXY_OPERATOR_RATE_LIMITED_CODES = [429, 503]    # reported as "rate_limited"
    PROXY_OPERATOR_MAX_RETRIES = 3                    # retries after a ban, through another proxy
    PROXY_OPERATOR_MAX_RATE_LIMITED_RETRIES = 20      # retries after a rate limit
    PROXY_OPERATOR_TARGET_CONCURRENCY = 1             # requests in flight per target

Per target (host or host:port) it holds one lease and sends every request for that target
through the lease's proxy, with its credentials. A response with one of the codes is
reported (once per lease and target, with the response's Retry-After), the lease is released,
and the request is retried through a new lease: the operator no longer hands out the reported
proxy for that target while it cools down. Leases are renewed before they expire, and all
are released when the spider closes. ``request.meta["proxy_operator"] = False`` skips a
request; ``request.meta["proxy_operator_proxy"]`` names the proxy that carried it.

When no proxy is free for a target (every matching one cools down for it, or is leased for it
or full), the request is deferred, never failed: the middleware waits the 409's Retry-After
on the reactor (``proxy_operator/deferred`` counts it) and asks again, for as long as it takes.
A retry after a rate limit is paced the same way (the reported proxy cools for the site's
Retry-After), so it has its own, larger bound. At most ``PROXY_OPERATOR_TARGET_CONCURRENCY``
requests per target are in flight (the rest wait here, before a proxy is chosen): all of a
target's requests go through its one lease, and requests already sent when a 429 arrives reach
the site while it asked to wait, which strict sites punish with a ban.

The API calls are blocking (requests); they run in Twisted's thread pool, never on the reactor.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Set
from urllib.parse import urlsplit

from scrapy import signals
from scrapy.exceptions import NotConfigured
from twisted.internet import defer, reactor, task, threads

try:  # Scrapy >= 2.6: works with the default and the asyncio reactor alike.
    from scrapy.utils.defer import maybe_deferred_to_future
except ImportError:  # pragma: no cover - older Scrapy
    def maybe_deferred_to_future(d):  # type: ignore[no-redef]
        return d

from .client import APIError, Client, Lease, NoMatch, parse_retry_after

logger = logging.getLogger(__name__)

META_SKIP = "proxy_operator"
META_LEASE = "proxy_operator_lease"
META_TARGET = "proxy_operator_target"
META_PROXY = "proxy_operator_proxy"
META_RETRIES = "proxy_operator_retries"
META_LIMITED_RETRIES = "proxy_operator_rate_limited_retries"
META_SLOT = "proxy_operator_slot"
# The wait when a 409 carries no Retry-After (an older operator).
NO_MATCH_WAIT = 5.0


def target_of(url: str) -> str:
    """The lease target of a URL: its lower-cased host, with the port when one is given."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{host}:{port}" if port else host


class ProxyOperatorMiddleware:
    def __init__(self, client: Client, selector: Optional[Dict[str, str]] = None, ttl: int = 300,
                 renew_margin: float = 60.0, banned_codes=(403,), rate_limited_codes=(429, 503),
                 max_retries: int = 3, stats=None, renew_check: Optional[float] = None,
                 max_rate_limited_retries: int = 20, target_concurrency: int = 1):
        self.client = client
        self.selector = dict(selector or {})
        self.ttl = int(ttl)
        self.renew_margin = min(float(renew_margin), self.ttl / 2.0)
        self.codes: Dict[int, str] = {int(c): "rate_limited" for c in rate_limited_codes}
        self.codes.update({int(c): "banned" for c in banned_codes})
        self.max_retries = int(max_retries)
        self.max_rate_limited_retries = int(max_rate_limited_retries)
        self.target_concurrency = max(1, int(target_concurrency))
        self._slots: Dict[str, defer.DeferredSemaphore] = {}
        self.stats = stats
        self.renew_check = renew_check or max(1.0, min(30.0, self.renew_margin / 2.0))
        self.leases: Dict[str, Lease] = {}
        self._inflight: Dict[str, List[defer.Deferred]] = {}
        self._reported: Set[tuple] = set()
        self._loop: Optional[task.LoopingCall] = None
        self._closed = False

    @classmethod
    def from_crawler(cls, crawler):
        s = crawler.settings
        url = s.get("PROXY_OPERATOR_URL")
        if not url:
            raise NotConfigured("PROXY_OPERATOR_URL is not set")
        # lease_wait=0: the middleware waits for a free proxy itself, on the reactor, rather
        # than in a thread-pool thread.
        client = Client(url, token=s.get("PROXY_OPERATOR_TOKEN") or None,
                        timeout=s.getfloat("PROXY_OPERATOR_TIMEOUT", 10.0), lease_wait=0)
        mw = cls(
            client,
            selector=s.getdict("PROXY_OPERATOR_SELECTOR"),
            ttl=s.getint("PROXY_OPERATOR_TTL", 300),
            renew_margin=s.getfloat("PROXY_OPERATOR_RENEW_MARGIN", 60.0),
            banned_codes=s.getlist("PROXY_OPERATOR_BANNED_CODES", [403]),
            rate_limited_codes=s.getlist("PROXY_OPERATOR_RATE_LIMITED_CODES", [429, 503]),
            max_retries=s.getint("PROXY_OPERATOR_MAX_RETRIES", 3),
            max_rate_limited_retries=s.getint("PROXY_OPERATOR_MAX_RATE_LIMITED_RETRIES", 20),
            target_concurrency=s.getint("PROXY_OPERATOR_TARGET_CONCURRENCY", 1),
            stats=crawler.stats,
        )
        crawler.signals.connect(mw.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(mw.spider_closed, signal=signals.spider_closed)
        return mw

    # -- helpers ---------------------------------------------------------------------------

    def _inc(self, key: str, n: int = 1) -> None:
        if self.stats is not None:
            self.stats.inc_value(f"proxy_operator/{key}", n)

    async def _call(self, fn, *args, **kwargs):
        return await maybe_deferred_to_future(threads.deferToThread(fn, *args, **kwargs))

    async def _lease_for(self, target: str) -> Lease:
        lease = self.leases.get(target)
        if lease is not None:
            if lease.seconds_left() > self.renew_margin:
                return lease
            renewed = await self._renew(target, lease)
            if renewed is not None:
                return renewed
        if target in self._inflight:
            waiter: defer.Deferred = defer.Deferred()
            self._inflight[target].append(waiter)
            return await maybe_deferred_to_future(waiter)
        self._inflight[target] = []
        try:
            lease = await self._lease_when_free(target)
        except Exception as exc:
            for w in self._inflight.pop(target, []):
                w.errback(exc)
            raise
        self.leases[target] = lease
        self._inc("leases")
        logger.debug("leased %s for %s (lease %s)", lease.proxy_id, target, lease.lease_id)
        for w in self._inflight.pop(target, []):
            w.callback(lease)
        return lease

    async def _lease_when_free(self, target: str) -> Lease:
        """Leases a proxy for target, waiting on the reactor (never in a thread) while none is
        free: the request is deferred, not failed."""
        while True:
            try:
                return await self._call(self.client.lease, selector=self.selector or None,
                                        ttl_seconds=self.ttl, target=target, wait=0)
            except NoMatch as exc:
                if self._closed:
                    raise
                delay = exc.retry_after if exc.retry_after is not None else NO_MATCH_WAIT
                self._inc("deferred")
                logger.debug("no proxy free for %s (%s); asking again in %.0f s", target, exc.message, delay)
                await maybe_deferred_to_future(task.deferLater(reactor, max(0.1, delay), lambda: None))

    async def _renew(self, target: str, lease: Lease) -> Optional[Lease]:
        try:
            renewed = await self._call(self.client.renew, lease.lease_id, self.ttl)
        except APIError as exc:
            if exc.status == 404:  # expired, released, or the operator restarted
                if self.leases.get(target) is lease:
                    del self.leases[target]
                self._inc("renewals/lost")
                return None
            raise
        if self.leases.get(target) is lease:
            self.leases[target] = renewed
        self._inc("renewals")
        return renewed

    def _release_later(self, lease: Lease) -> defer.Deferred:
        d = threads.deferToThread(self.client.release, lease.lease_id)
        d.addCallback(lambda _: self._inc("released"))
        d.addErrback(lambda f: logger.warning("releasing lease %s failed: %s", lease.lease_id, f.value))
        return d

    def _drop(self, target: str, lease_id: str) -> None:
        lease = self.leases.get(target)
        if lease is not None and lease.lease_id == lease_id:
            del self.leases[target]
            self._release_later(lease)

    # -- signals -----------------------------------------------------------------------------

    def spider_opened(self, spider=None):
        self._loop = task.LoopingCall(self._renew_due)
        self._loop.start(self.renew_check, now=False)

    def _renew_due(self):
        for target, lease in list(self.leases.items()):
            if lease.seconds_left() <= self.renew_margin:
                d = defer.ensureDeferred(self._renew(target, lease))
                d.addErrback(lambda f, t=target: logger.warning("renewing the lease for %s failed: %s", t, f.value))

    def spider_closed(self, spider=None, reason=None):
        self._closed = True
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        leases, self.leases = list(self.leases.values()), {}
        d = defer.DeferredList([self._release_later(l) for l in leases], consumeErrors=True)
        d.addBoth(lambda _: self.client.close())
        return d

    # -- downloader middleware ---------------------------------------------------------------

    async def process_request(self, request, spider=None):
        if request.meta.get(META_SKIP) is False:
            return None
        target = target_of(request.url)
        if not target:
            return None
        slot = self._slots.get(target)
        if slot is None:
            slot = self._slots[target] = defer.DeferredSemaphore(self.target_concurrency)
        await maybe_deferred_to_future(slot.acquire())
        try:
            lease = await self._lease_for(target)
        except BaseException:
            slot.release()
            raise
        request.meta[META_SLOT] = target
        request.meta["proxy"] = lease.proxy_url
        request.meta[META_LEASE] = lease.lease_id
        request.meta[META_TARGET] = target
        request.meta[META_PROXY] = lease.proxy_id
        return None

    def _free_slot(self, request) -> None:
        target = request.meta.pop(META_SLOT, None)
        if target is not None and target in self._slots:
            self._slots[target].release()

    async def process_response(self, request, response, spider=None):
        lease_id = request.meta.get(META_LEASE)
        result = self.codes.get(response.status)
        if not lease_id or result is None:
            self._free_slot(request)
            return response
        target = request.meta[META_TARGET]
        try:
            await self._report_and_drop(request, response, lease_id, target, result)
        finally:
            # Only now may the target's next request pick a proxy: never the reported one.
            self._free_slot(request)
        # A rate limit's retry waits for the cooldown it reported, so it has its own bound.
        key, bound = ((META_LIMITED_RETRIES, self.max_rate_limited_retries) if result == "rate_limited"
                      else (META_RETRIES, self.max_retries))
        retries = int(request.meta.get(key, 0))
        if retries >= bound or self._closed:
            self._inc("gave_up")
            return response
        meta = dict(request.meta)
        for k in ("proxy", "_auth_proxy", META_LEASE, META_PROXY, META_SLOT):
            meta.pop(k, None)
        meta[key] = retries + 1
        retry = request.replace(meta=meta, dont_filter=True)
        retry.headers.pop(b"Proxy-Authorization", None)
        self._inc("retries")
        return retry

    async def _report_and_drop(self, request, response, lease_id: str, target: str, result: str) -> None:
        key = (lease_id, target)
        if key not in self._reported:
            self._reported.add(key)
            raw = response.headers.get(b"Retry-After")
            retry_after = parse_retry_after(raw.decode("latin-1") if raw else None)
            try:
                await self._call(self.client.report, lease_id, result, target, retry_after)
                self._inc(f"reports/{result}")
                logger.info("reported %s on %s through %s (Retry-After %s)", result, target,
                            request.meta.get(META_PROXY), retry_after)
            except APIError as exc:
                # A vanished lease (404) cannot be reported; the retry below leases anew.
                logger.warning("report %s on %s failed: %s", result, target, exc)
        self._drop(target, lease_id)

    def process_exception(self, request, exception, spider=None):
        # The proxy may be gone: let the next attempt (Scrapy's retry) lease another one.
        self._free_slot(request)
        lease_id = request.meta.get(META_LEASE)
        if lease_id:
            self._drop(request.meta[META_TARGET], lease_id)
        return None

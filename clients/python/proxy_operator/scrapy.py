"""A Scrapy downloader middleware that crawls every target domain through leased proxies.

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
    PROXY_OPERATOR_LEASES_PER_TARGET = 4              # proxies one target is spread over
    PROXY_OPERATOR_PACE = 1.0                         # first requests/s per proxy and target
    PROXY_OPERATOR_MAX_WAIT = 300                     # seconds a request may wait for a proxy

Per target (host or host:port) it holds up to ``PROXY_OPERATOR_LEASES_PER_TARGET`` leases and
spreads the target's requests over them, one request in flight per lease, each lease paced:
a site's rate limit applies per source address, so N proxies carry N times the pace of one.
The pace is learned per target (additive increase, multiplicative decrease): it starts at
``PROXY_OPERATOR_PACE`` requests/s per proxy, grows by ``PROXY_OPERATOR_PACE_STEP`` (0.02) for
every success of each proxy (the step is shared by the leases held) up to
``PROXY_OPERATOR_MAX_PACE`` (20), and falls to 0.7 of itself on a rate limit, at most once per
wait the site asks for; the proxy that met the rate limit also waits the answer's Retry-After
(with up to 10 % jitter) before its next request there. The rate limit is reported (``rate_limited``, with the Retry-After) and
the request retried, through whichever lease is due first; the lease is kept. A ban is
reported (``banned``), its lease released, and the request retried through another proxy:
the operator no longer hands out the banned proxy for that target while it cools down. Leases
are renewed before they expire, and all are released when the spider closes.
``request.meta["proxy_operator"] = False`` skips a request;
``request.meta["proxy_operator_proxy"]`` names the proxy that carried it.

When no proxy is free for a target (every matching one cools down for it, or is leased for it
or full), the request waits on the reactor for the 409's Retry-After and asks again
(``proxy_operator/no_proxy`` counts the 409s), but for at most ``PROXY_OPERATOR_MAX_WAIT``
seconds in all: then it fails with ``ProxyWaitTimeout``, whose message says what the operator
answered (``proxy_operator/gave_up``). It never hangs.

The API calls are blocking (requests); they run in Twisted's thread pool, never on the reactor.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Dict, List, Optional
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
# The wait when a 409 carries no Retry-After (an older operator).
NO_MATCH_WAIT = 5.0
# The longest a waiting request sleeps before it looks again (a lease may free up sooner).
POLL = 0.25
# The slowest pace a target falls to: one request per proxy every 20 s.
MIN_PACE = 0.05
# What a rate limit leaves of a target's pace (multiplicative decrease).
PACE_CUT = 0.7


class ProxyWaitTimeout(Exception):
    """No proxy could carry a request within PROXY_OPERATOR_MAX_WAIT seconds."""


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


class _Slot:
    """One lease held for a target: at most one request in flight, and the time it may carry
    the next (monotonic seconds)."""

    __slots__ = ("lease", "busy", "next_at")

    def __init__(self, lease: Lease, now: float):
        self.lease = lease
        self.busy = False
        self.next_at = now


class _Target:
    """What the middleware holds and has learned for one target."""

    __slots__ = ("slots", "pace", "cut_at", "leasing", "no_match_until", "no_match")

    def __init__(self, pace: float):
        self.slots: List[_Slot] = []
        self.pace = pace  # requests/s per proxy
        self.cut_at = float("-inf")  # when a rate limit last cut the pace
        self.leasing = False
        self.no_match_until = 0.0
        self.no_match: Optional[NoMatch] = None

    def slot(self, lease_id: str) -> Optional[_Slot]:
        for s in self.slots:
            if s.lease.lease_id == lease_id:
                return s
        return None


class ProxyOperatorMiddleware:
    def __init__(self, client: Client, selector: Optional[Dict[str, str]] = None, ttl: int = 300,
                 renew_margin: float = 60.0, banned_codes=(403,), rate_limited_codes=(429, 503),
                 max_retries: int = 3, stats=None, renew_check: Optional[float] = None,
                 max_rate_limited_retries: int = 20, leases_per_target: int = 4, pace: float = 1.0,
                 pace_step: float = 0.02, max_pace: float = 20.0, max_wait: float = 300.0,
                 clock=time.monotonic):
        self.client = client
        self.selector = dict(selector or {})
        self.ttl = int(ttl)
        self.renew_margin = min(float(renew_margin), self.ttl / 2.0)
        self.codes: Dict[int, str] = {int(c): "rate_limited" for c in rate_limited_codes}
        self.codes.update({int(c): "banned" for c in banned_codes})
        self.max_retries = int(max_retries)
        self.max_rate_limited_retries = int(max_rate_limited_retries)
        self.leases_per_target = max(1, int(leases_per_target))
        self.max_pace = max(MIN_PACE, float(max_pace))
        self.pace = min(self.max_pace, max(MIN_PACE, float(pace)))
        self.pace_step = max(0.0, float(pace_step))
        self.max_wait = max(0.0, float(max_wait))
        self.stats = stats
        self.renew_check = renew_check or max(1.0, min(30.0, self.renew_margin / 2.0))
        self.targets: Dict[str, _Target] = {}
        self._clock = clock
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
            leases_per_target=s.getint("PROXY_OPERATOR_LEASES_PER_TARGET", 4),
            pace=s.getfloat("PROXY_OPERATOR_PACE", 1.0),
            pace_step=s.getfloat("PROXY_OPERATOR_PACE_STEP", 0.02),
            max_pace=s.getfloat("PROXY_OPERATOR_MAX_PACE", 20.0),
            max_wait=s.getfloat("PROXY_OPERATOR_MAX_WAIT", 300.0),
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

    async def _sleep(self, seconds: float) -> None:
        await maybe_deferred_to_future(task.deferLater(reactor, max(0.01, seconds), lambda: None))

    def _target(self, target: str) -> _Target:
        t = self.targets.get(target)
        if t is None:
            t = self.targets[target] = _Target(self.pace)
        return t

    async def _take(self, target: str) -> _Slot:
        """The lease that carries target's next request: the first whose pace allows it,
        leasing another while fewer than leases_per_target are held; waits (on the reactor)
        for at most max_wait, then raises ProxyWaitTimeout."""
        t = self._target(target)
        deadline = self._clock() + self.max_wait
        while True:
            now = self._clock()
            ready = [s for s in t.slots if not s.busy and s.next_at <= now]
            if ready:
                s = min(ready, key=lambda s: s.next_at)
                if s.lease.seconds_left() <= self.renew_margin:
                    s.busy = True
                    renewed = await self._renew(target, s)
                    s.busy = False
                    if not renewed:
                        continue
                s.busy = True
                s.next_at = now + 1.0 / t.pace
                return s
            if self._closed:
                raise ProxyWaitTimeout(f"spider closing: no proxy for {target}")
            if len(t.slots) < self.leases_per_target and not t.leasing and now >= t.no_match_until:
                await self._lease_more(target, t)
                continue
            if now >= deadline:
                self._inc("gave_up")
                why = t.no_match.message if t.no_match is not None else "every lease held for it was busy or paced"
                raise ProxyWaitTimeout(f"no proxy carried a request for {target} within {self.max_wait:.0f} s "
                                       f"(PROXY_OPERATOR_MAX_WAIT): {why}")
            wake = [deadline, now + POLL]
            wake += [s.next_at for s in t.slots if not s.busy]
            if len(t.slots) < self.leases_per_target and not t.leasing:
                wake.append(t.no_match_until)
            await self._sleep(min(wake) - now)

    async def _lease_more(self, target: str, t: _Target) -> None:
        t.leasing = True
        try:
            lease = await self._call(self.client.lease, selector=self.selector or None,
                                     ttl_seconds=self.ttl, target=target, wait=0)
        except NoMatch as exc:
            delay = exc.retry_after if exc.retry_after is not None else NO_MATCH_WAIT
            t.no_match, t.no_match_until = exc, self._clock() + max(0.1, delay)
            self._inc("no_proxy")
            logger.debug("no proxy free for %s (%s); asking again in %.0f s", target, exc.message, delay)
            return
        finally:
            t.leasing = False
        if self._closed:
            self._release_later(lease)
            return
        t.no_match = None
        t.slots.append(_Slot(lease, self._clock()))
        self._inc("leases")
        logger.debug("leased %s for %s (lease %s, %d held)", lease.proxy_id, target, lease.lease_id, len(t.slots))

    async def _renew(self, target: str, s: _Slot) -> bool:
        try:
            s.lease = await self._call(self.client.renew, s.lease.lease_id, self.ttl)
        except APIError as exc:
            if exc.status == 404:  # expired, released, or the operator restarted
                self._remove(target, s, release=False)
                self._inc("renewals/lost")
                return False
            raise
        self._inc("renewals")
        return True

    def _release_later(self, lease: Lease) -> defer.Deferred:
        d = threads.deferToThread(self.client.release, lease.lease_id)
        d.addCallback(lambda _: self._inc("released"))
        d.addErrback(lambda f: logger.warning("releasing lease %s failed: %s", lease.lease_id, f.value))
        return d

    def _remove(self, target: str, s: _Slot, release: bool = True) -> None:
        t = self.targets.get(target)
        if t is not None and s in t.slots:
            t.slots.remove(s)
            if release:
                self._release_later(s.lease)

    # -- signals -----------------------------------------------------------------------------

    def spider_opened(self, spider=None):
        self._loop = task.LoopingCall(self._renew_due)
        self._loop.start(self.renew_check, now=False)

    def _renew_due(self):
        for target, t in list(self.targets.items()):
            for s in list(t.slots):
                if s.lease.seconds_left() <= self.renew_margin:
                    d = defer.ensureDeferred(self._renew(target, s))
                    d.addErrback(lambda f, tg=target: logger.warning("renewing a lease for %s failed: %s", tg, f.value))

    def spider_closed(self, spider=None, reason=None):
        self._closed = True
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        leases = [s.lease for t in self.targets.values() for s in t.slots]
        self.targets = {}
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
        s = await self._take(target)
        request.meta["proxy"] = s.lease.proxy_url
        request.meta[META_LEASE] = s.lease.lease_id
        request.meta[META_TARGET] = target
        request.meta[META_PROXY] = s.lease.proxy_id
        return None

    def _done(self, request) -> Optional[_Slot]:
        """Frees the lease that carried request for the target's next one; its slot, or None
        when the lease is gone meanwhile."""
        lease_id, target = request.meta.get(META_LEASE), request.meta.get(META_TARGET)
        t = self.targets.get(target) if target else None
        s = t.slot(lease_id) if t is not None and lease_id else None
        if s is not None:
            s.busy = False
        return s

    async def process_response(self, request, response, spider=None):
        s = self._done(request)
        lease_id = request.meta.get(META_LEASE)
        if not lease_id:
            return response
        target = request.meta[META_TARGET]
        t = self._target(target)
        result = self.codes.get(response.status)
        if result is None:
            # The step is per proxy: spread over every lease held, the pace grows as fast with
            # one proxy as with ten.
            t.pace = min(self.max_pace, t.pace + self.pace_step / max(1, len(t.slots)))
            return response
        raw = response.headers.get(b"Retry-After")
        retry_after = parse_retry_after(raw.decode("latin-1") if raw else None)
        if result == "rate_limited":
            # Slower for every proxy on this target, once per wait the site asks for (the 429s
            # of requests already in flight say nothing new); this proxy also waits that long.
            now = self._clock()
            wait = max(retry_after or 0.0, 1.0 / t.pace)
            if now - t.cut_at >= wait:
                t.pace, t.cut_at = max(MIN_PACE, t.pace * PACE_CUT), now
            if s is not None:
                s.next_at = now + wait * (1.0 + random.uniform(0.0, 0.1))
            self._report_later(request, lease_id, target, result, retry_after)
        else:
            await self._report(request, lease_id, target, result, retry_after)
            if s is not None:
                self._remove(target, s)
        key, bound = ((META_LIMITED_RETRIES, self.max_rate_limited_retries) if result == "rate_limited"
                      else (META_RETRIES, self.max_retries))
        retries = int(request.meta.get(key, 0))
        if retries >= bound or self._closed:
            self._inc("gave_up")
            return response
        meta = dict(request.meta)
        for k in ("proxy", "_auth_proxy", META_LEASE, META_PROXY):
            meta.pop(k, None)
        meta[key] = retries + 1
        retry = request.replace(meta=meta, dont_filter=True)
        retry.headers.pop(b"Proxy-Authorization", None)
        self._inc("retries")
        return retry

    def _report_later(self, request, lease_id: str, target: str, result: str, retry_after) -> None:
        d = defer.ensureDeferred(self._report(request, lease_id, target, result, retry_after))
        d.addErrback(lambda f: logger.warning("report %s on %s failed: %s", result, target, f.value))

    async def _report(self, request, lease_id: str, target: str, result: str, retry_after) -> None:
        try:
            await self._call(self.client.report, lease_id, result, target, retry_after)
            self._inc(f"reports/{result}")
            log = logger.info if result == "banned" else logger.debug
            log("reported %s on %s through %s (Retry-After %s)", result, target, request.meta.get(META_PROXY), retry_after)
        except APIError as exc:
            # A vanished lease (404) cannot be reported; a retry leases anew.
            logger.warning("report %s on %s failed: %s", result, target, exc)

    def process_exception(self, request, exception, spider=None):
        # The proxy may be gone: let the next attempt (Scrapy's retry) lease another one.
        s = self._done(request)
        target = request.meta.get(META_TARGET)
        if s is not None and target:
            self._remove(target, s)
        return None

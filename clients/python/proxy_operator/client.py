"""A small synchronous client for the proxy-operator discovery and lease API."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import time
from typing import Any, Callable, Dict, List, Mapping, Optional

import requests

__all__ = ["APIError", "Client", "DEFAULT_LEASE_WAIT", "Lease", "NoMatch", "Unavailable", "parse_retry_after"]

#: How long ``Client.lease`` keeps asking while nothing can be leased (409), in seconds: the
#: Go client's DefaultLeaseWait.
DEFAULT_LEASE_WAIT = 60.0
# The wait after a 409 without Retry-After (an older server).
_NO_MATCH_FALLBACK_WAIT = 5.0


class APIError(Exception):
    """An answer other than success; ``status`` is the HTTP status, ``message`` the API's error."""

    def __init__(self, status: int, message: str, body: Optional[Mapping[str, Any]] = None,
                 retry_after: Optional[float] = None):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
        self.body = dict(body or {})
        self.retry_after = retry_after


class NoMatch(APIError):
    """409: no proxy can be leased; the counts say why."""

    @property
    def matching(self) -> int:
        return int(self.body.get("matching", 0))

    @property
    def unhealthy(self) -> int:
        return int(self.body.get("unhealthy", 0))

    @property
    def at_capacity(self) -> int:
        return int(self.body.get("atCapacity", 0))

    @property
    def cooling_for_target(self) -> int:
        return int(self.body.get("coolingForTarget", 0))

    @property
    def leased_for_target(self) -> int:
        return int(self.body.get("leasedForTarget", 0))

    @property
    def available_at(self) -> Optional[_dt.datetime]:
        """The earliest time a matching proxy frees up by itself (a cooldown ends, a lease
        expires); None when the server knows none. ``retry_after`` is when to ask again."""
        v = self.body.get("availableAt")
        return _parse_time(v) if isinstance(v, str) and v else None


class Unavailable(APIError):
    """503 (the fleet view is warming up) or 429, still so after the client's retries."""


def _parse_time(s: str) -> _dt.datetime:
    # RFC 3339 in UTC, e.g. 2026-11-30T12:05:00Z or with fractional seconds.
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    if "." in s:
        head, _, rest = s.partition(".")
        frac, sign, tz = rest.partition("+") if "+" in rest else rest.partition("-")
        s = f"{head}.{frac[:6]}{sign}{tz}"
    return _dt.datetime.fromisoformat(s)


def parse_retry_after(value: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """Seconds from a Retry-After header: delta-seconds or an HTTP date; None if absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        from email.utils import parsedate_to_datetime

        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    now = time.time() if now is None else now
    return max(0.0, when.timestamp() - now)


@dataclasses.dataclass
class Lease:
    """A granted lease. ``proxy_url`` carries the credentials: never log it."""

    lease_id: str
    proxy: Dict[str, Any]
    expires_at: _dt.datetime
    ttl_seconds: int
    proxy_url: str = dataclasses.field(repr=False)
    username: Optional[str] = None
    password: Optional[str] = dataclasses.field(default=None, repr=False)
    target: Optional[str] = None
    session_key: Optional[str] = None

    @property
    def proxy_id(self) -> str:
        return str(self.proxy.get("id", ""))

    @property
    def address(self) -> str:
        return f"{self.proxy.get('ip')}:{self.proxy.get('port')}"

    def seconds_left(self, now: Optional[_dt.datetime] = None) -> float:
        now = now or _dt.datetime.now(_dt.timezone.utc)
        return (self.expires_at - now).total_seconds()

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> "Lease":
        return cls(
            lease_id=body["leaseID"],
            proxy=dict(body.get("proxy") or {}),
            expires_at=_parse_time(body["expiresAt"]),
            ttl_seconds=int(body.get("ttlSeconds", 0)),
            proxy_url=body["proxyURL"],
            username=body.get("username"),
            password=body.get("password"),
            target=body.get("target"),
            session_key=body.get("sessionKey"),
        )


class Client:
    """The discovery and lease API at ``base_url`` (e.g. ``http://127.0.0.1:8090``).

    503 and 429 answers are retried after their Retry-After, at most ``retries`` times and
    never waiting more than ``max_wait`` seconds at once; then ``Unavailable`` is raised.

    While nothing can be leased (409), ``lease`` waits each answer's Retry-After and asks again,
    as long as the next ask falls within ``lease_wait`` seconds of the call's start (default
    ``DEFAULT_LEASE_WAIT``, a minute; 0 never waits); an answer whose Retry-After reaches past
    that raises ``NoMatch`` at once, with ``available_at`` saying when a proxy frees up. The
    Go client (``client.WithLeaseWait``) follows the same rule with the same default.
    """

    def __init__(self, base_url: str, token: Optional[str] = None, timeout: float = 10.0,
                 retries: int = 3, max_wait: float = 30.0, session: Optional[requests.Session] = None,
                 sleep: Callable[[float], None] = time.sleep, lease_wait: float = DEFAULT_LEASE_WAIT,
                 clock: Callable[[], float] = time.monotonic):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retries = retries
        self.max_wait = max_wait
        self.lease_wait = max(0.0, float(lease_wait))
        self._sleep = sleep
        self._clock = clock
        self._session = session or requests.Session()
        # The API is on loopback or inside the cluster: never send it through HTTP_PROXY.
        self._session.trust_env = False
        self._headers = {"Accept": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, method: str, path: str, body: Optional[Mapping[str, Any]] = None,
              params: Optional[Mapping[str, str]] = None) -> requests.Response:
        attempt = 0
        while True:
            res = self._session.request(method, self.base_url + path, json=body, params=params,
                                        headers=self._headers, timeout=self.timeout)
            if res.status_code < 400:
                return res
            try:
                payload = res.json()
            except ValueError:
                payload = {}
            if not isinstance(payload, dict):
                payload = {}
            message = str(payload.get("error") or res.reason or "error")
            wait = parse_retry_after(res.headers.get("Retry-After"))
            if res.status_code in (429, 503):
                if attempt < self.retries:
                    attempt += 1
                    self._sleep(min(self.max_wait, wait if wait is not None else 2.0 ** attempt))
                    continue
                raise Unavailable(res.status_code, message, payload, wait)
            if res.status_code == 409:
                raise NoMatch(res.status_code, message, payload, wait)
            raise APIError(res.status_code, message, payload, wait)

    def list_proxies(self, healthy: Optional[bool] = None, **attrs: str) -> Dict[str, Any]:
        """``GET /v1/proxies``: ``{"complete", "count", "proxies"}``, every page of it (the server
        answers at most 500 proxies a page and a ``continue`` value for the next one). Never
        carries credentials."""
        params = {f"attr.{k}": v for k, v in attrs.items()}
        if healthy is not None:
            params["healthy"] = "true" if healthy else "false"
        out: Dict[str, Any] = {"complete": True, "count": 0, "proxies": []}
        for _ in range(1000):
            page = self._call("GET", "/v1/proxies", params=params).json()
            out["complete"] = out["complete"] and bool(page.get("complete"))
            if page.get("completeAt"):
                out["completeAt"] = page["completeAt"]
            out["proxies"].extend(page.get("proxies") or [])
            out["count"] = len(out["proxies"])
            cont = page.get("continue")
            if not cont or cont == params.get("continue"):
                return out
            params["continue"] = cont
        raise APIError(0, "list_proxies: more than 1000 pages", {}, None)

    def lease(self, selector: Optional[Mapping[str, str]] = None, ttl_seconds: Optional[int] = None,
              target: Optional[str] = None, session_key: Optional[str] = None,
              wait: Optional[float] = None) -> Lease:
        """``POST /v1/leases``. While nothing fits (409) it waits as the class says, for up to
        ``wait`` seconds (default: the client's ``lease_wait``); then raises ``NoMatch``."""
        body: Dict[str, Any] = {}
        if selector:
            body["selector"] = dict(selector)
        if ttl_seconds is not None:
            body["ttlSeconds"] = int(ttl_seconds)
        if target:
            body["target"] = target
        if session_key:
            body["sessionKey"] = session_key
        deadline = self._clock() + (self.lease_wait if wait is None else max(0.0, float(wait)))
        while True:
            try:
                return Lease.from_json(self._call("POST", "/v1/leases", body).json())
            except NoMatch as exc:
                pause = exc.retry_after if exc.retry_after is not None else _NO_MATCH_FALLBACK_WAIT
                if self._clock() + pause > deadline:
                    raise
                self._sleep(pause)

    def renew(self, lease_id: str, ttl_seconds: Optional[int] = None) -> Lease:
        """``POST /v1/leases/{id}/renew``; an APIError with status 404 when the lease is gone."""
        body = {"ttlSeconds": int(ttl_seconds)} if ttl_seconds is not None else {}
        return Lease.from_json(self._call("POST", f"/v1/leases/{_quote(lease_id)}/renew", body).json())

    def release(self, lease_id: str) -> None:
        """``DELETE /v1/leases/{id}``. Idempotent."""
        self._call("DELETE", f"/v1/leases/{_quote(lease_id)}")

    def report(self, lease_id: str, result: str, target: str,
               retry_after_seconds: Optional[float] = None) -> Dict[str, Any]:
        """``POST /v1/leases/{id}/report`` with ``rate_limited``, ``banned`` or ``ok``."""
        body: Dict[str, Any] = {"result": result, "target": target}
        if retry_after_seconds is not None:
            body["retryAfterSeconds"] = max(0, min(604800, int(round(retry_after_seconds))))
        return self._call("POST", f"/v1/leases/{_quote(lease_id)}/report", body).json()


def _quote(s: str) -> str:
    from urllib.parse import quote

    return quote(s, safe="")


def proxies_of(listing: Mapping[str, Any]) -> List[Dict[str, Any]]:
    return list(listing.get("proxies") or [])

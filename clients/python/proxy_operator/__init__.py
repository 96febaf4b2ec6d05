"""Client for the proxy-operator discovery and lease API.

``Client`` speaks the API (docs/openapi.yaml); ``proxy_operator.scrapy.ProxyOperatorMiddleware``
is a Scrapy downloader middleware that leases a proxy per target domain.
"""

from .client import APIError, Client, Lease, NoMatch, Unavailable

__all__ = ["APIError", "Client", "Lease", "NoMatch", "Unavailable"]

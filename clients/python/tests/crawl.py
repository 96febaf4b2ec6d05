"""Runs one Scrapy crawl through ProxyOperatorMiddleware and writes what happened as JSON: run
by the Scrapy tests in its own process (a Twisted reactor starts only once).

    crawl.py API TOKEN OUT site START [TTL MARGIN CONCURRENCY]
        a site from START, following every link (test_scrapy_crawl.py)
    crawl.py API TOKEN OUT pages BASE N [SELECTOR_JSON]
        the pages BASE/page/0..N-1 with Scrapy's default per-site concurrency, through the
        middleware at its defaults (test_scrapy_farm.py; bench_scrapy.py with the demo fleet's
        selector)
    crawl.py - - OUT direct BASE N DELAY
        the same pages straight to the site, no proxy, one request at a time DELAY seconds
        apart: one polite IP (bench_scrapy.py's baseline)
    crawl.py - - OUT proxy BASE N
        the same pages with Scrapy's defaults and no middleware: the proxy comes from the
        http_proxy environment variable, as a user points Scrapy at the gateway
        (bench_naive.py)
"""

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import scrapy  # noqa: E402
from scrapy.crawler import CrawlerProcess  # noqa: E402


class CrawlSpider(scrapy.Spider):
    name = "crawl"

    def __init__(self, urls, follow, **kw):
        super().__init__(**kw)
        self.start_urls = urls
        self.follow = follow

    def parse(self, response):
        yield {"url": response.url, "status": response.status, "proxy": response.meta.get("proxy_operator_proxy")}
        if self.follow:
            for href in response.css("a::attr(href)").getall():
                yield response.follow(href, callback=self.parse)


def main():
    api, token, out, mode = sys.argv[1:5]
    rest = sys.argv[5:]
    if mode == "site":
        urls, follow = [rest[0]], True
        ttl, margin, concurrency = (int(a) for a in (rest[1:4] or ["30", "10", "4"]))
    elif mode in ("pages", "direct", "proxy"):
        urls, follow = [f"{rest[0].rstrip('/')}/page/{i}" for i in range(int(rest[1]))], False
        ttl, margin, concurrency = 60, 20, 8
    else:
        sys.exit(f"crawl.py: mode {mode!r} is not 'site', 'pages', 'direct' or 'proxy'")
    selector = json.loads(rest[2]) if mode == "pages" and len(rest) > 2 else {"pool": "scrapy"}
    items = []
    settings = {
        "DOWNLOADER_MIDDLEWARES": {"proxy_operator.scrapy.ProxyOperatorMiddleware": 745},
        "PROXY_OPERATOR_URL": api,
        "PROXY_OPERATOR_TOKEN": token,
        "PROXY_OPERATOR_SELECTOR": selector,
        "PROXY_OPERATOR_TTL": ttl,
        "PROXY_OPERATOR_RENEW_MARGIN": margin,
        # Only the middleware retries: a page fetched after a 429 proves it went elsewhere or
        # waited, instead of failing.
        "RETRY_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "INFO",
        "CONCURRENT_REQUESTS": concurrency,
        "REQUEST_FINGERPRINTER_IMPLEMENTATION": "2.7",
        "HTTPERROR_ALLOW_ALL": True,
    }
    if mode == "direct":
        del settings["DOWNLOADER_MIDDLEWARES"]
        settings.update({"DOWNLOAD_DELAY": float(rest[2]), "RANDOMIZE_DOWNLOAD_DELAY": False,
                         "CONCURRENT_REQUESTS_PER_DOMAIN": 1})
    if mode == "proxy":
        # Scrapy's defaults (16 requests at once, 8 per site, 2 retries of 429 and 503), the
        # proxy from http_proxy: only what the bench needs to read the answers.
        settings = {"TELNETCONSOLE_ENABLED": False, "LOG_LEVEL": "INFO", "HTTPERROR_ALLOW_ALL": True,
                    "REQUEST_FINGERPRINTER_IMPLEMENTATION": "2.7"}
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(CrawlSpider)

    def collect(item, **_):
        items.append(dict(item))

    # Signals hold weak references: collect must stay referenced while the crawl runs.
    crawler.signals.connect(collect, signal=scrapy.signals.item_scraped)
    process.crawl(crawler, urls=urls, follow=follow)
    start = time.monotonic()
    process.start()
    elapsed = time.monotonic() - start
    stats = {k: v for k, v in crawler.stats.get_stats().items() if isinstance(v, (int, float, str))}
    Path(out).write_text(json.dumps({"items": items, "stats": stats, "seconds": elapsed}))


if __name__ == "__main__":
    main()

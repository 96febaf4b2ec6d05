"""Runs one Scrapy crawl of a site through ProxyOperatorMiddleware and writes what happened as
JSON: run by test_scrapy_crawl.py in its own process (a Twisted reactor starts only once)."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import scrapy  # noqa: E402
from scrapy.crawler import CrawlerProcess  # noqa: E402


class SiteSpider(scrapy.Spider):
    name = "site"

    def __init__(self, start, **kw):
        super().__init__(**kw)
        self.start_urls = [start]

    def parse(self, response):
        yield {"url": response.url, "status": response.status, "proxy": response.meta.get("proxy_operator_proxy")}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)


def main():
    api, token, start, out = sys.argv[1:5]
    ttl, margin, concurrency = (int(a) for a in (sys.argv[5:8] or ["30", "10", "4"]))
    items = []
    settings = {
        "DOWNLOADER_MIDDLEWARES": {"proxy_operator.scrapy.ProxyOperatorMiddleware": 745},
        "PROXY_OPERATOR_URL": api,
        "PROXY_OPERATOR_TOKEN": token,
        "PROXY_OPERATOR_SELECTOR": {"pool": "scrapy"},
        "PROXY_OPERATOR_TTL": ttl,
        "PROXY_OPERATOR_RENEW_MARGIN": margin,
        # Only the middleware retries: a page fetched after a 429 proves it went elsewhere.
        "RETRY_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "INFO",
        "CONCURRENT_REQUESTS": concurrency,
        "REQUEST_FINGERPRINTER_IMPLEMENTATION": "2.7",
        "HTTPERROR_ALLOW_ALL": True,
    }
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(SiteSpider)
    def collect(item, **_):
        items.append(dict(item))

    # Signals hold weak references: collect must stay referenced while the crawl runs.
    crawler.signals.connect(collect, signal=scrapy.signals.item_scraped)
    process.crawl(crawler, start=start)
    process.start()
    stats = {k: v for k, v in crawler.stats.get_stats().items() if isinstance(v, (int, float, str))}
    Path(out).write_text(json.dumps({"items": items, "stats": stats}))


if __name__ == "__main__":
    main()

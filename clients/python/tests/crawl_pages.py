"""Runs one Scrapy crawl of a list of pages through ProxyOperatorMiddleware with Scrapy's
default per-site concurrency (the middleware keeps one request per site in flight), and writes
what happened as JSON: run by test_scrapy_farm.py in its own process (a Twisted reactor starts only once)."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import scrapy  # noqa: E402
from scrapy.crawler import CrawlerProcess  # noqa: E402


class PagesSpider(scrapy.Spider):
    name = "pages"

    def __init__(self, urls, **kw):
        super().__init__(**kw)
        self.start_urls = urls

    def parse(self, response):
        yield {"url": response.url, "status": response.status, "proxy": response.meta.get("proxy_operator_proxy")}


def main():
    api, token, base, pages, out = sys.argv[1:6]
    urls = [f"{base.rstrip('/')}/page/{i}" for i in range(int(pages))]
    items = []
    settings = {
        "DOWNLOADER_MIDDLEWARES": {"proxy_operator.scrapy.ProxyOperatorMiddleware": 745},
        "PROXY_OPERATOR_URL": api,
        "PROXY_OPERATOR_TOKEN": token,
        "PROXY_OPERATOR_SELECTOR": {"pool": "scrapy"},
        "PROXY_OPERATOR_TTL": 60,
        "PROXY_OPERATOR_RENEW_MARGIN": 20,
        # Only the middleware retries: every page fetched proves it waited instead of failing.
        "RETRY_ENABLED": False,
        "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "INFO",
        "CONCURRENT_REQUESTS": 8,
        "REQUEST_FINGERPRINTER_IMPLEMENTATION": "2.7",
        "HTTPERROR_ALLOW_ALL": True,
    }
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(PagesSpider)

    def collect(item, **_):
        items.append(dict(item))

    crawler.signals.connect(collect, signal=scrapy.signals.item_scraped)
    process.crawl(crawler, urls=urls)
    process.start()
    stats = {k: v for k, v in crawler.stats.get_stats().items() if isinstance(v, (int, float, str))}
    Path(out).write_text(json.dumps({"items": items, "stats": stats}))


if __name__ == "__main__":
    main()

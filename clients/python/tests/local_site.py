"""A local HTTP site on loopback that answers 429 (with Retry-After) to one proxy: the first
client address that reaches it. Proxies of the mock provider egress from their own 127.x.y.z
address, so the site tells them apart by client IP."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PAGES = 12


class Site:
    def __init__(self, retry_after: int = 120, refuse_first: bool = True, delay: float = 0.0):
        self.retry_after = retry_after
        self.refuse_first = refuse_first
        self.delay = delay
        self.lock = threading.Lock()
        self.banned_ip = None
        self.served = {}  # path -> client ip that got the 200
        self.refused = []  # (path, ip) answered 429
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                ip = self.client_address[0]
                if site.delay:
                    time.sleep(site.delay)
                with site.lock:
                    if site.banned_ip is None and site.refuse_first:
                        site.banned_ip = ip
                    banned = ip == site.banned_ip
                    if banned:
                        site.refused.append((self.path, ip))
                    else:
                        site.served[self.path] = ip
                if banned:
                    body = b"slow down"
                    self.send_response(429)
                    self.send_header("Retry-After", str(site.retry_after))
                else:
                    if self.path == "/":
                        links = "".join(f'<a href="/page/{i}">page {i}</a>' for i in range(1, PAGES + 1))
                        body = f"<html><body>{links}</body></html>".encode()
                    else:
                        body = f"<html><body>{self.path}</body></html>".encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def host(self) -> str:
        host, port = self.server.server_address[:2]
        return f"{host}:{port}"

    def all_paths(self):
        return ["/"] + [f"/page/{i}" for i in range(1, PAGES + 1)]

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

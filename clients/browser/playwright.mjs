// Playwright through the gateway: node playwright.mjs [url]
// GATEWAY is the gateway's host:port (make run: 127.0.0.1:8091), DISCOVERY_TOKEN the password
// (make run takes any).
import { chromium } from "playwright-core";

const gateway = process.env.GATEWAY ?? "127.0.0.1:8091";
const url = process.argv[2] ?? "http://127.0.0.1:8092/page/1"; // make run's demo site
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  // Chromium answers the gateway's 407 with these; the username selects (docs/api.md).
  proxy: { server: `http://${gateway}`, username: "session-pw1", password: process.env.DISCOVERY_TOKEN ?? "x" },
  // Chromium sends nothing for loopback through a proxy unless told to; the demo site is there.
  args: ["--proxy-bypass-list=<-loopback>"],
});
try {
  const page = await browser.newPage();
  const res = await page.goto(url);
  console.log(res.status(), res.headers()["x-proxy-operator-proxy"] ?? "", (await page.innerText("body")).trim());
} finally {
  await browser.close();
}

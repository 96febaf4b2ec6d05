// Puppeteer through the gateway: node puppeteer.mjs [url]
// GATEWAY is the gateway's host:port (make run: 127.0.0.1:8091), DISCOVERY_TOKEN the password
// (make run takes any).
import puppeteer from "puppeteer-core";

const gateway = process.env.GATEWAY ?? "127.0.0.1:8091";
const url = process.argv[2] ?? "http://127.0.0.1:8092/page/1"; // make run's demo site
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  // --no-sandbox only where Chromium runs as root (a container's default user).
  args: [`--proxy-server=http://${gateway}`, "--proxy-bypass-list=<-loopback>", ...(process.getuid?.() === 0 ? ["--no-sandbox"] : [])],
});
try {
  const page = await browser.newPage();
  // Chromium takes no proxy password on its command line: Puppeteer answers the 407.
  await page.authenticate({ username: "session-pp1", password: process.env.DISCOVERY_TOKEN ?? "x" });
  const res = await page.goto(url);
  console.log(res.status(), res.headers()["x-proxy-operator-proxy"] ?? "", (await page.$eval("body", (b) => b.innerText)).trim());
} finally {
  await browser.close();
}

# proxy-operator quickstart: build, start the operator with a demo fleet of 3 mock proxies and a
# demo site (no cluster needed), list them, lease one, fetch through it, report and release;
# then crawl the demo site through the gateway as a plain curl loop would. Paste it into bash
# from the repository root, or run `make demo`. The operator stops when the block ends.
# The lease's credential lives only in a shell variable: nothing is written to disk but the log.
(
set -eu
HOOK=${HOOK_ADDR:-127.0.0.1:8080} DISC=${DISCOVERY_ADDR:-127.0.0.1:8090} BIN=${BIN:-bin/proxy-operator}
GW=${GATEWAY_ADDR:-127.0.0.1:8091} SITE=${DEMO_SITE_ADDR:-127.0.0.1:8092}
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3} DISCOVERY_TOKEN=${DISCOVERY_TOKEN:-quickstart-token}
LOG=${TMPDIR:-/tmp}/proxy-operator-quickstart.log
auth="Authorization: Bearer $DISCOVERY_TOKEN"
echo "== build $BIN (the flags of make build, without the cloud clients; seconds with a warm Go cache, minutes on an empty one)"
start=$(date +%s); CGO_ENABLED=0 go build -trimpath -tags "${GO_TAGS-omit_aws,omit_gcp,omit_hetzner}" -o "$BIN" .; echo "   built in $(( $(date +%s) - start )) s"
KUBECONFIG= "$BIN" -hook-addr "$HOOK" -hooks-insecure -discovery-addr "$DISC" -console -gateway-addr "$GW" -demo-site-addr "$SITE" -log-format text -fleet-warmup 0s -demo-proxies 3 >"$LOG" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true; echo "== operator stopped (its log: $LOG)"' EXIT
echo "== waiting for the demo fleet: 3 healthy proxies (GET /v1/proxies?healthy=true)"
start=$(date +%s); n=0
for i in $(seq 240); do
  kill -0 $pid 2>/dev/null || { echo "operator exited:"; cat "$LOG"; exit 1; }
  n=$(curl -fsS -H "$auth" "http://$DISC/v1/proxies?healthy=true" 2>/dev/null | jq .count) || n=0
  [ "$n" = 3 ] && break
  sleep 0.5
done
[ "$n" = 3 ] || { echo "demo fleet not healthy after 2 minutes; the log ends:"; tail -n 20 "$LOG"; exit 1; }
echo "   healthy after $(( $(date +%s) - start )) s"
curl -fsS -H "$auth" "http://$DISC/v1/proxies?healthy=true" | jq -c '.proxies[] | {id, ip, port, healthy, attributes}'
echo "== lease one for example.com (POST /v1/leases)"
lease=$(curl -fsS --retry 30 --retry-delay 1 --retry-all-errors -XPOST -H "$auth" "http://$DISC/v1/leases" -d '{"selector":{"demo":"true"},"ttlSeconds":300,"target":"example.com"}')
jq -c '{leaseID, proxy: .proxy.id, ip: .proxy.ip, port: .proxy.port, expiresAt}' <<<"$lease"
id=$(jq -r .leaseID <<<"$lease") proxyURL=$(jq -r .proxyURL <<<"$lease")
echo "== through the proxy: $(curl -s -o /dev/null -w '%{http_code}' -x "${proxyURL#*@}" "http://$HOOK/healthz") without its credential, $(curl -s -o /dev/null -w '%{http_code}' -x "$proxyURL" "http://$HOOK/healthz") with the lease's proxyURL"
echo "== report rate_limited for example.com, then release"
curl -fsS -XPOST -H "$auth" "http://$DISC/v1/leases/$id/report" -d '{"result":"rate_limited","target":"example.com","retryAfterSeconds":30}'
echo "   release: HTTP $(curl -sS -o /dev/null -w '%{http_code}' -XDELETE -H "$auth" "http://$DISC/v1/leases/$id")"
echo "== through the gateway: 30 pages of the demo site (2 requests/s per address), 10 at a time, no lease to handle"
start=$(date +%s)
codes=$(seq 30 | xargs -P 10 -I{} curl -s -o /dev/null -w '%{http_code}\n' -x "http://any:$DISCOVERY_TOKEN@$GW" "http://$SITE/page/{}" | sort | uniq -c | xargs)
echo "   status codes (count code): $codes, in $(( $(date +%s) - start )) s (the site's limit allows 30 in 5 s through 3 addresses)"
curl -fsS "http://$SITE/stats" | jq -c '{servedPerProxy: [.sources[] | .served], answered429: ([.sources[] | .rateLimited] | add)}'
echo "== what the gateway learned of the site: its pace per upstream (GET /v1/sites)"
curl -fsS -H "$auth" "http://$DISC/v1/sites" | jq -c '.sites[] | {host, recentRequests, pace}'
echo "== the web console (-console): GET /ui/login answers $(curl -s -o /dev/null -w '%{http_code}' "http://$DISC/ui/login"); with make run, open http://$DISC/ui/ (see README, Console)"
echo "== quickstart done: a demo fleet, a lease, a request through it, a crawl through the gateway"
)

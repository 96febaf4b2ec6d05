# proxy-operator quickstart: build, start the operator, play Metacontroller until a mock proxy
# is Ready, then lease it, report on it and release it. Paste it into bash from the repository
# root, or run `make demo`. The operator stops when the block ends.
(
set -eu
HOOK=${HOOK_ADDR:-127.0.0.1:8080} DISC=${DISCOVERY_ADDR:-127.0.0.1:8090} BIN=${BIN:-bin/proxy-operator}
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3} DISCOVERY_TOKEN=${DISCOVERY_TOKEN:-quickstart-token}
LOG=${TMPDIR:-/tmp}/proxy-operator-quickstart.log
auth="Authorization: Bearer $DISCOVERY_TOKEN"
echo "== go build -o $BIN . (about 15 s with a warm Go cache; about 6 minutes on an empty one)"
start=$(date +%s); go build -o "$BIN" .; echo "   built in $(( $(date +%s) - start )) s"
KUBECONFIG= "$BIN" -hook-addr "$HOOK" -discovery-addr "$DISC" -log-format text -fleet-warmup 5s -gc-min-age 1m >"$LOG" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true; echo "== operator stopped (its log: $LOG)"' EXIT
echo "== waiting for http://$HOOK/readyz"
until curl -fs "http://$HOOK/readyz" >/dev/null; do
  kill -0 $pid 2>/dev/null || { echo "operator exited:"; cat "$LOG"; exit 1; }
  sleep 0.2
done
echo "== playing Metacontroller: post a sync, feed the answer's status back, until Ready"
req=$(jq --arg u "http://$HOOK/healthz" '.parent.spec.healthCheck.probeURL = $u' testdata/demo/sync-mock-proxy.json)
phase=none
for i in $(seq 60); do
  resp=$(curl -fsS -XPOST "http://$HOOK/sync" -H 'Content-Type: application/json' -d "$req")
  echo "   sync $i: $(jq -c '{phase: .status.phase, ip: .status.ip, resyncAfterSeconds}' <<<"$resp")"
  phase=$(jq -r .status.phase <<<"$resp")
  [ "$phase" = Ready ] && break
  req=$(jq --argjson r "$resp" '.parent.status = $r.status' <<<"$req")
  sleep 1
done
[ "$phase" = Ready ] || { echo "proxy not Ready after 60 syncs"; exit 1; }
echo "== healthy proxies (GET /v1/proxies?healthy=true)"
curl -fsS -H "$auth" "http://$DISC/v1/proxies?healthy=true" | jq -c '.proxies[] | {id, ip, port, healthy}'
echo "== lease (503 while the 5 s fleet warm-up lasts, then 200)"
for i in $(seq 60); do
  code=$(curl -sS -o "$LOG.lease" -w '%{http_code}' -XPOST -H "$auth" "http://$DISC/v1/leases" \
    -d '{"selector":{"geo":"local"},"ttlSeconds":300,"target":"example.com"}')
  [ "$code" = 200 ] && break
  echo "   $code $(cat "$LOG.lease")"; sleep 1
done
[ "$code" = 200 ] || { echo "no lease"; exit 1; }
id=$(jq -r .leaseID "$LOG.lease"); jq -c '{leaseID, proxy: .proxy.id, ip: .proxy.ip, port: .proxy.port, expiresAt}' "$LOG.lease"
echo "== report rate_limited for example.com, then release"
curl -fsS -XPOST -H "$auth" "http://$DISC/v1/leases/$id/report" -d '{"result":"rate_limited","target":"example.com"}'
echo "   release: HTTP $(curl -sS -o /dev/null -w '%{http_code}' -XDELETE -H "$auth" "http://$DISC/v1/leases/$id")"
echo "== quickstart done: a Ready proxy, leased and released"
)

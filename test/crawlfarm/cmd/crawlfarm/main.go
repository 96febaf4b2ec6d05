// Command crawlfarm serves the benchmark's target farm on loopback until interrupted, then
// prints what each site served and refused, per source IP. Point a crawler (through proxies)
// at the printed hosts to see how it fares against rate limits and bans.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/proxy-operator/proxy-operator/test/crawlfarm"
)

func main() {
	sites := flag.Int("sites", 8, "number of sites, on 127.0.10.1, 127.0.10.2, ...")
	strict := flag.Int("strict", 6, "how many of them are strict (the rest lenient)")
	limited := flag.Bool("rate-limited", false, "every site is issue 31's rate-limited site instead (1 request/s per IP, burst 1, 429 Retry-After 2 s, a 60 s ban after 5 ignored 429s)")
	flag.Parse()
	if *sites < 1 || *sites > 254 || *strict < 0 || *strict > *sites {
		fmt.Fprintln(os.Stderr, "crawlfarm: want 1 <= -sites <= 254 and 0 <= -strict <= -sites")
		os.Exit(2)
	}
	cfg := crawlfarm.MostlyStrict(*sites, *strict)
	if *limited {
		for i := range cfg {
			cfg[i] = crawlfarm.RateLimited(cfg[i].Name, cfg[i].Addr)
		}
	}
	f, err := crawlfarm.Start(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crawlfarm:", err)
		os.Exit(1)
	}
	for i, h := range f.Hosts() {
		c := cfg[i]
		fmt.Printf("%s http://%s/  rps=%g burst=%d retryAfter=%s tolerance=%d ban=%s repeatBan=%s\n",
			c.Name, h, c.RPS, c.Burst, c.RetryAfter, c.Tolerance, c.Ban, c.RepeatBan)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	f.Close()
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(f.Stats())
}

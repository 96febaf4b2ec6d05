package redisstore

import (
	"embed"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/*.lua
var luaFS embed.FS

// scripts are the server-side operations; each is the shared prelude plus its own body, run
// with EVALSHA (go-redis falls back to EVAL once after a Redis restart flushed the cache).
type scripts struct {
	acquire, release, renew, report, active, sweep, publish, health, remove, poolload, pace, cooling, holdings, clear *redis.Script
}

func loadScripts() scripts {
	prelude := mustRead("prelude")
	s := func(name string) *redis.Script { return redis.NewScript(prelude + mustRead(name)) }
	return scripts{
		acquire: s("acquire"), release: s("release"), renew: s("renew"), report: s("report"),
		active: s("active"), sweep: s("sweep"), publish: s("publish"), health: s("health"), remove: s("remove"),
		poolload: s("poolload"), pace: s("pace"), cooling: s("cooling"), holdings: s("holdings"), clear: s("clear"),
	}
}

func mustRead(name string) string {
	b, err := luaFS.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic("redisstore: embedded script " + name + " missing: " + err.Error()) // a build defect
	}
	return string(b)
}

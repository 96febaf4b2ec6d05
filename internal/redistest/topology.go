package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelSet is a primary, its replicas and the sentinels that watch them, all on loopback.
type SentinelSet struct {
	t testing.TB
	// Master is the name the sentinels know the set by.
	Master    string
	Servers   []*Server // the initial primary first, then its replicas
	Sentinels []*Server
}

// StartSentinelSet runs a primary with replicas and sentinels (a quorum of a majority) that
// mark a server down after one second, and waits until the replicas are in sync and every
// sentinel knows every replica and every other sentinel. extra are more redis-server
// arguments for every data node. It skips (fails in CI) without redis-sentinel.
func StartSentinelSet(t testing.TB, replicas, sentinels int, extra ...string) *SentinelSet {
	t.Helper()
	sbin := SentinelBinary(t)
	set := &SentinelSet{t: t, Master: "leases"}
	primary := Start(t, extra...)
	set.Servers = append(set.Servers, primary)
	host, port, _ := net.SplitHostPort(primary.Addr)
	for range replicas {
		set.Servers = append(set.Servers, Start(t, append([]string{"--replicaof", host, port}, extra...)...))
	}
	quorum := sentinels/2 + 1
	for range sentinels {
		s := &Server{t: t, Dir: t.TempDir(), bin: sbin}
		conf := filepath.Join(s.Dir, "sentinel.conf")
		s.args = func(p string) []string {
			// Sentinel rewrites its file with what it learns: write it only the first time.
			if _, err := os.Stat(conf); err != nil {
				text := fmt.Sprintf("port %s\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir %s\nloglevel warning\n"+
					"sentinel monitor %s %s %s %d\nsentinel down-after-milliseconds %[3]s 1000\n"+
					"sentinel failover-timeout %[3]s 10000\nsentinel parallel-syncs %[3]s 2\n",
					p, s.Dir, set.Master, host, port, quorum)
				if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			return []string{conf}
		}
		s.launch()
		set.Sentinels = append(set.Sentinels, s)
	}
	ctx := context.Background()
	Until(t, 30*time.Second, "replicas in sync with the primary", func() bool {
		for _, r := range set.Servers[1:] {
			info, err := r.Client().Info(ctx, "replication").Result()
			if err != nil || !strings.Contains(info, "master_link_status:up") {
				return false
			}
		}
		return true
	})
	Until(t, 30*time.Second, "sentinels know every replica and each other", func() bool {
		for _, s := range set.Sentinels {
			sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, DialTimeout: time.Second})
			rs, err1 := sc.Replicas(ctx, set.Master).Result()
			ss, err2 := sc.Sentinels(ctx, set.Master).Result()
			_ = sc.Close()
			if err1 != nil || err2 != nil || len(rs) != replicas || len(ss) != sentinels-1 {
				return false
			}
		}
		return true
	})
	return set
}

// URL is the store URL of the set: redis+sentinel://s1,s2,s3/master.
func (set *SentinelSet) URL() string {
	addrs := make([]string, len(set.Sentinels))
	for i, s := range set.Sentinels {
		addrs[i] = s.Addr
	}
	return "redis+sentinel://" + strings.Join(addrs, ",") + "/" + set.Master
}

// PrimaryAddr is the primary the first sentinel that answers names.
func (set *SentinelSet) PrimaryAddr() string {
	for _, s := range set.Sentinels {
		if !s.Running() {
			continue
		}
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, DialTimeout: time.Second})
		hp, err := sc.GetMasterAddrByName(context.Background(), set.Master).Result()
		_ = sc.Close()
		if err == nil && len(hp) == 2 {
			return net.JoinHostPort(hp[0], hp[1])
		}
	}
	return ""
}

// Server returns the data node listening on addr (nil when none).
func (set *SentinelSet) Server(addr string) *Server {
	for _, s := range set.Servers {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// StartCluster runs a Redis Cluster of n primaries (no replicas), the slots split evenly, and
// waits until every node reports the cluster ok. extra are more redis-server arguments.
func StartCluster(t testing.TB, n int, extra ...string) []*Server {
	t.Helper()
	ctx := context.Background()
	nodes := make([]*Server, n)
	for i := range nodes {
		nodes[i] = Start(t, append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000"}, extra...)...)
	}
	for i, s := range nodes {
		lo, hi := i*16384/n, (i+1)*16384/n-1
		if err := s.Client().ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			t.Fatalf("redistest: cluster addslotsrange on %s: %v", s.Addr, err)
		}
	}
	for _, s := range nodes[1:] {
		host, port, _ := net.SplitHostPort(s.Addr)
		p, _ := strconv.Atoi(port)
		if err := nodes[0].Client().ClusterMeet(ctx, host, strconv.Itoa(p)).Err(); err != nil {
			t.Fatalf("redistest: cluster meet %s: %v", s.Addr, err)
		}
	}
	Until(t, 60*time.Second, "every cluster node reports cluster_state:ok", func() bool {
		for _, s := range nodes {
			info, err := s.Client().ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", n)) {
				return false
			}
		}
		return true
	})
	return nodes
}

// ClusterURL is the store URL of nodes: redis+cluster://n1,n2,n3.
func ClusterURL(nodes []*Server) string {
	addrs := make([]string, len(nodes))
	for i, s := range nodes {
		addrs[i] = s.Addr
	}
	return "redis+cluster://" + strings.Join(addrs, ",")
}

package api

import (
	"context"
	"time"
)

// Variables for tests.
var (
	featureWatchFirst  = 2 * time.Second
	featureWatchSettle = time.Minute
	featureWatchEvery  = 30 * time.Second
)

// WatchFeatures asks the other members, shortly after the start (again
// every featureWatchFirst until they all answer, for a minute at most) and
// then every featureWatchEvery until ctx ends, whether their /healthz lists the
// features the leader's gates need of every member (header lists, batch
// entries), and remembers those seen listing them (membersLacking). Every
// node does, not only the leader: only a node that had itself seen a
// member list a feature let it stay down (a member seen is presumed to
// keep it), so when the leader was killed, a new leader that had never
// asked a member down with it refused every complete storing a header
// sent twice (two Set-Cookie) with 503 until that member came back; the
// middleware's callers had their answers, unstored, and their retries ran
// the request again once the lease ran out.
func (s *Server) WatchFeatures(ctx context.Context) {
	// Every featureWatchFirst at first, until a round has found every
	// member listing them (a node just started may not reach them all at
	// once), for featureWatchSettle at most.
	settle := time.Now().Add(featureWatchSettle)
	t := time.NewTimer(featureWatchFirst)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		all := true
		for _, f := range []string{featureHeaderLists, featureBatch} {
			if s.membersLacking(ctx, f) != "" {
				all = false
			}
		}
		if !all && time.Now().Before(settle) {
			t.Reset(featureWatchFirst)
			continue
		}
		settle = time.Time{}
		t.Reset(featureWatchEvery)
	}
}

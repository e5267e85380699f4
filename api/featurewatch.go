package api

import (
	"context"
	"time"
)

// Variables for tests.
var (
	featureWatchFirst = 2 * time.Second
	featureWatchEvery = 30 * time.Second
)

// WatchFeatures asks the other members, shortly after the start and then
// every featureWatchEvery until ctx ends, whether their /healthz lists the
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
	t := time.NewTimer(featureWatchFirst)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, f := range []string{featureHeaderLists, featureBatch} {
			s.membersLacking(ctx, f)
		}
		t.Reset(featureWatchEvery)
	}
}

package api

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// featureHeaderLists, on /healthz, says this node's Apply decodes complete
// entries whose response holds headers stored as arrays (two Set-Cookie):
// they are written in a newer encoding, which a member of an older version
// would refuse, and so fall out of step with the others.
const featureHeaderLists = "header-lists"

// listsGate remembers whether every member knows header lists. Only a
// complete that stores a header as an array asks; a member found lacking
// is asked again after listsGateRetry, and all of them every
// listsGateRecheck once they all knew (a member of an older version may
// join later).
type listsGate struct {
	mu      sync.Mutex // held while asking: completes with lists wait for one answer
	ok      bool
	checked time.Time
	waiting string
}

// Variables for tests.
var (
	listsGateRetry   = 10 * time.Second
	listsGateRecheck = 30 * time.Second
)

// headerListsProblem is nil when a response with headers stored as arrays
// may be proposed, and a 503 while a member does not know them yet (a
// rolling upgrade): retrying once every member runs this version stores it.
func (s *Server) headerListsProblem() *problem {
	g := &s.lists
	g.mu.Lock()
	defer g.mu.Unlock()
	wait := listsGateRetry
	if g.ok {
		wait = listsGateRecheck
	}
	if g.checked.IsZero() || time.Since(g.checked) >= wait {
		lacking := s.membersLacking(context.Background(), featureHeaderLists)
		g.ok, g.checked = lacking == "", time.Now()
		if lacking != g.waiting && lacking != "" {
			s.log.Info("responses with a header sent more than once are refused until every member answers and runs a version that stores them: these members are down, unreachable, or run an older version", "members", lacking)
		}
		g.waiting = lacking
	}
	if g.ok {
		return nil
	}
	p := newProblem(http.StatusServiceUnavailable, codeUnavailable, fmt.Sprintf(
		"a header stored as an array (sent more than once) needs every member to run a version that knows it; %s not yet (a rolling upgrade, or a member down?): retry once they do", g.waiting))
	p.retryAfter = int(listsGateRetry / time.Second)
	return p
}

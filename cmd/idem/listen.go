package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/idem-store/idem/api"
	"github.com/idem-store/idem/raftfsm"
)

// connConfig is how `idem serve` bounds what clients can hold: open
// connections, and how long headers, bodies and idle connections may take.
// The in-flight cap and the body timeout are api.Limits (the handler
// applies them); docs/API.md lists every limit.
type connConfig struct {
	maxConns          int
	readHeaderTimeout time.Duration
	idleTimeout       time.Duration
}

// connFlags registers the flags of the connection and abuse limits.
func connFlags(fs *flag.FlagSet, c *serveConfig) {
	c.conns = connConfig{maxConns: 4096, readHeaderTimeout: 10 * time.Second, idleTimeout: 60 * time.Second}
	fs.IntVar(&c.conns.maxConns, "max-conns", c.conns.maxConns, fmt.Sprintf("most open HTTP connections. When all are taken, a new one takes the slot of the oldest that holds no request (a header still arriving, a silent one open for 1s, or keep-alive idle for 1s; over HTTPS, one without a request for 1s), which is closed; when every one holds a request, %d more are kept for /healthz and /readyz, and beyond those a connection is answered 503 and closed at once. Lowered to fit the open-files limit (RLIMIT_NOFILE, raised to its hard limit at start)", api.HealthHeadroom))
	fs.IntVar(&c.limits.MaxInFlight, "max-inflight", c.limits.MaxInFlight, "most HTTP requests handled at once, /healthz and /readyz aside (503 unavailable with Retry-After: 1 above); a request counts from its headers, while its body arrives too. With --auth-file one app token's requests hold at most half of them")
	sizeVar(fs, &c.limits.MaxInFlightBytes, "max-inflight-bytes", 0, "most bytes of request bodies held at once, each counted by its Content-Length (--max-request-bytes when chunked) from its headers to the end of its answer; a request whose body would go past it is answered 503 unavailable with Retry-After: 1 before its body is read. A body takes about twice its bytes of memory while read and decoded. Default: an eighth of the machine's memory, at least 256MiB and at least --max-request-bytes (a smaller value given is refused). With --auth-file one app token's bodies hold at most half of it (one alone is always taken)")
	fs.DurationVar(&c.conns.readHeaderTimeout, "read-header-timeout", c.conns.readHeaderTimeout, "time a client has to send a request's headers")
	fs.DurationVar(&c.limits.BodyReadTimeout, "body-read-timeout", c.limits.BodyReadTimeout, "time a client has to send a whole request body, from the end of its headers (400 invalid_request, connection closed, after it)")
	fs.DurationVar(&c.conns.idleTimeout, "idle-timeout", c.conns.idleTimeout, "how long an idle keep-alive connection is kept open")
	fs.Int64Var(&c.limits.MaxPrincipals, "max-principals", c.limits.MaxPrincipals, "principals that may hold live keys, cluster wide (429 principal_limit for a claim of a new principal above)")
}

// validate names every impossible connection limit.
func (c connConfig) validate() []error {
	var errs []error
	if c.maxConns < 1 {
		errs = append(errs, fmt.Errorf("--max-conns %d must be at least 1", c.maxConns))
	}
	if c.readHeaderTimeout < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("--read-header-timeout %s must be at least 10ms", c.readHeaderTimeout))
	}
	if c.idleTimeout < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("--idle-timeout %s must be at least 10ms", c.idleTimeout))
	}
	return errs
}

// fdReserve is how many descriptors are kept from the HTTP connections
// for everything else a node opens: Pebble's tables and WAL, the raft log,
// snapshots, raft's connections to its peers, forwarding to the leader.
// The connections others open to the raft port and to --health-addr are
// counted apart (fdBudget).
func fdReserve(limit uint64) uint64 {
	return min(max(limit/4, 256), 2048)
}

// listenerCap is the most connections the raft port, and --health-addr,
// hold open under an open-files limit: their usual bound (256), lowered to
// an eighth of a small limit. Anyone who reaches the raft port can hold
// its bound, silent connections a few seconds each, again and again: at
// 256 under a limit of 1,024 (with the API's connections full) or 256,
// they took the descriptors Pebble's flushes, the raft log and the HTTP
// accepts needed.
func listenerCap(limit uint64, usual int) int {
	return int(min(uint64(usual), max(limit/8, 16)))
}

// fdBudget is how an open-files limit is shared by the connections others
// open: the API's (--max-conns, lowered to fit, and HealthHeadroom more),
// the raft port's and --health-addr's (0 without one).
type fdBudget struct {
	httpConns, raftConns, healthConns int
}

// budgetFor fits the connection caps into the open-files limit soft,
// fdReserve(soft) kept for the node's own files.
func budgetFor(soft uint64, maxConns int, health bool) fdBudget {
	b := fdBudget{httpConns: maxConns, raftConns: listenerCap(soft, raftfsm.DefaultMaxInboundRaftConns)}
	if health {
		b.healthConns = listenerCap(soft, healthMaxConns)
	}
	room := int64(soft) - int64(fdReserve(soft)) - api.HealthHeadroom - int64(b.raftConns) - int64(b.healthConns)
	if int64(b.httpConns) > room {
		b.httpConns = int(max(room, 16))
	}
	return b
}

// limitConns raises the open-files limit as far as allowed and wraps ln in
// the connection cap, lowered when the limit cannot hold it. It logs both,
// and returns the caps of the raft port and --health-addr (health: one is
// given) fitted to the same limit.
func limitConns(ln net.Listener, c connConfig, health bool, log *slog.Logger) (*api.ConnListener, fdBudget) {
	soft, hard, err := raiseOpenFiles()
	b := fdBudget{httpConns: c.maxConns, raftConns: raftfsm.DefaultMaxInboundRaftConns}
	if health {
		b.healthConns = healthMaxConns
	}
	switch {
	case errors.Is(err, errNoRlimit):
	case err != nil:
		log.Warn("cannot read or raise the open-files limit", "error", err)
	default:
		b = budgetFor(soft, c.maxConns, health)
		if b.httpConns < c.maxConns {
			log.Warn("--max-conns lowered to fit the open-files limit; raise the hard limit (ulimit -Hn, LimitNOFILE=) to allow more",
				"max-conns", c.maxConns, "lowered-to", b.httpConns, "open-files", soft, "hard-limit", hard)
		}
		log.Info("connection limits", "open-files", soft, "hard-limit", hard, "max-conns", b.httpConns, "raft-conns", b.raftConns)
	}
	return api.Listen(ln, b.httpConns, log), b
}

// httpServer is the server of the API with the header and idle timeouts.
// There is no ReadTimeout or WriteTimeout: a body is bounded by the
// handler (--body-read-timeout, cleared once read), the sending of an
// answer from when it is ready (api.Config.AnswerWriteTimeout), and a long
// answer (a snapshot download) must not be cut.
//
// OPTIONS * goes to the handler too (DisableGeneralOptionsHandler): net/http
// answered it itself, past the API's shield, so a chunked one kept its
// connection while the connection sniffer had stopped at it, and a later
// request there with both Content-Length and Transfer-Encoding was served,
// not refused.
func httpServer(h http.Handler, cl *api.ConnListener, c connConfig) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: c.readHeaderTimeout, IdleTimeout: c.idleTimeout, ConnContext: cl.ConnContext,
		ConnState: cl.ConnState, DisableGeneralOptionsHandler: true}
}

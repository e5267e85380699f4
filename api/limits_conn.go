package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-store/idem/internal/mono"
)

// The limits that protect the node itself, applied to every request before
// its route (Server.ServeHTTP):
//
//   - a connection in the listener's health headroom (conns.go) is served
//     /healthz and /readyz only, once;
//   - a request carrying both Content-Length and Transfer-Encoding is 400
//     and its connection closed; any chunked request closes its connection
//     after the answer (RFC 9112 §6.3, see sniffer);
//   - at most Limits.MaxInFlight requests are handled at once; beyond it
//     503 unavailable with Retry-After: 1, decided before anything is read;
//   - at most Limits.MaxInFlightBytes of request bodies are held at once,
//     each counted by its Content-Length (Limits.MaxRequestBytes without
//     one) until its answer is written; beyond it 503 unavailable with
//     Retry-After: 1, decided before the body is read (bodyHeld);
//   - the whole body must arrive within Limits.BodyReadTimeout of the
//     handler's start. The deadline is cleared once the body is read, so
//     a long answer (a snapshot download) is never cut by it;
//   - every answer but a snapshot download's (and --pprof's) must be taken
//     within Config.AnswerWriteTimeout of when it starts (answerWriter).
//
// /healthz and /readyz are never counted nor refused for load: they are how
// an operator and a load balancer see the node under pressure.

// Problem codes of these limits.
const codePrincipalLimit = "principal_limit"

func init() {
	titles[codePrincipalLimit] = "Principal limit reached"
}

// connGuard holds the state of the limits.
type connGuard struct {
	inFlight  atomic.Int64
	inFlightS shedding // --max-inflight

	bodyBytes atomic.Int64 // request body bytes held now (--max-inflight-bytes)
	bodyS     shedding     // --max-inflight-bytes

	// byToken is what each app token's requests hold (by its name in the
	// auth file: *tokenLoad), so that one holds at most half of what the
	// other app tokens leave of --max-inflight and of --max-inflight-bytes
	// (tokenSlot), and of --max-batch-answer-bytes (answersHeldBy);
	// appLoad is their sum for the first two, Server.answering for the
	// third. Another token's entry holds only its refusal lines
	// (logRefused). An entry is kept once made (tokenLoadOf): there are as
	// many as names the auth file has listed.
	byToken sync.Map
	appLoad tokenLoad
}

// tokenLoadOf is the entry of byToken for the token named name, made on
// first use.
func (s *Server) tokenLoadOf(name string) *tokenLoad {
	v, ok := s.guards.byToken.Load(name)
	if !ok {
		l := new(tokenLoad)
		l.answers.name = name
		v, _ = s.guards.byToken.LoadOrStore(name, l)
	}
	return v.(*tokenLoad)
}

// tokenLoad is what one token's requests hold on this node.
type tokenLoad struct {
	requests atomic.Int64
	bytes    atomic.Int64 // of request bodies, as --max-inflight-bytes counts them
	batchOps atomic.Int64 // of its batches (tokenBatchOps)
	answers  tokenHeld    // bytes of its batches' answers (answersHeldBy)
	// shed counts the token's requests refused for its shares and spaces
	// the warning naming it. One spacer for every token let one tenant's
	// refusals keep another's out of the log, and its count was all
	// tokens' under one token's name.
	shed shedding
	// refusals spaces the lines of the token's requests refused for its
	// role or principals (logRefused).
	refusals refusalLog
}

// shedding counts the requests one load limit refused, and spaces its
// warning about them.
type shedding struct {
	refused atomic.Int64
	lastLog mono.Spacer // the warning's
}

// shed answers a request a load limit refused, before its body is read:
// 503 unavailable with Retry-After: 1 (nothing was decided), counted in sh
// and logged as why, naming the flag and its max, at most every 10 s.
func (s *Server) shed(w http.ResponseWriter, r *http.Request, sh *shedding, why, flag string, max int64, detail string) {
	sh.refused.Add(1)
	if sh.lastLog.Allow(10 * time.Second) {
		s.log.Warn("refusing requests: "+why, flag, max, "refused-total", sh.refused.Load())
	}
	p := newProblem(http.StatusServiceUnavailable, codeUnavailable, detail)
	p.retryAfter = 1
	refuseNow(w, r, p)
}

// tokenSlot counts r against its app token's shares of the load limits:
// with auth on, one app token's requests hold at most half of what the
// other app tokens' requests leave of --max-inflight (at least one
// request), and their bodies at most half of what the others' leave of
// --max-inflight-bytes (a body alone is always taken, as the node takes
// one alone). One tenant alone gets half of either bound; k tenants all
// holding what they may get a share of 1/(k+1) each, and so a tenant not
// among them always has one too. Without shares, one tenant whose
// clients sent their bodies slowly (each request holds its slot and its
// body's bytes for up to --body-read-timeout) or sent too many at once
// took the whole of either bound, and every other tenant's requests were
// 503 for as long as it kept them; with a fixed half each, two such
// tenants did. It is decided from the headers, before the body is read:
// past a share, r is answered 503 unavailable with Retry-After: 1 naming
// the token and the flag, counted with that flag's refusals, and ok is
// false. Otherwise release gives back what r holds.
func (s *Server) tokenSlot(w http.ResponseWriter, r *http.Request, cred *Credential) (release func(), ok bool) {
	load, all := s.tokenLoadOf(cred.Name), &s.guards.appLoad
	var reqs, body int64
	release = func() {
		load.requests.Add(-reqs)
		all.requests.Add(-reqs)
		load.bytes.Add(-body)
		all.bytes.Add(-body)
	}
	if limit := int64(s.cfg.Limits.MaxInFlight); limit > 0 {
		reqs = 1
		mine, total := load.requests.Add(1), all.requests.Add(1)
		if share := max(tokenShare(limit, mine, total), 1); mine > share {
			release()
			s.shedToken(w, r, load, &s.guards.inFlightS, cred, "requests", "max-inflight", limit, fmt.Sprintf(
				"the token %q has %d requests in flight on node %s, half of what other tokens' requests leave of the most it handles at once (--max-inflight %d), so that other tokens' requests still go; nothing was decided, retry shortly",
				cred.Name, mine-1, s.store.Self().ID, limit))
			return nil, false
		}
	}
	if limit := s.cfg.Limits.MaxInFlightBytes; limit > 0 {
		if n := s.bodyHeld(r); n > 0 {
			body = n
			mine, total := load.bytes.Add(n), all.bytes.Add(n)
			if mine > tokenShare(limit, mine, total) && mine != n {
				release()
				s.shedToken(w, r, load, &s.guards.bodyS, cred, "request bodies", "max-inflight-bytes", limit, fmt.Sprintf(
					"the token %q holds request bodies of %d bytes on node %s, and this one would take it past half of what other tokens' bodies leave of the most it holds at once (--max-inflight-bytes %d), so that other tokens' requests still go; nothing was decided, retry shortly",
					cred.Name, mine-n, s.store.Self().ID, limit))
				return nil, false
			}
		}
	}
	return release, true
}

// tokenShare is what one app token may hold of limit when it holds mine
// and every app token together total: half of what the others leave. One
// token alone may hold half; k tokens holding all they may hold 1/(k+1)
// each, so a tenant not among them always has a share.
func tokenShare(limit, mine, total int64) int64 { return (limit - (total - mine)) / 2 }

// shedToken answers a request refused for its token's share of a load
// limit: 503 unavailable with Retry-After: 1 and detail, unread, counted
// in the token's load and in the limit's own refusals (its metric), and
// logged naming the token and what of its (what) holds the share, at
// most every 10 s for each token.
func (s *Server) shedToken(w http.ResponseWriter, r *http.Request, load *tokenLoad, limitS *shedding, cred *Credential, what, flag string, limit int64, detail string) {
	refuseNow(w, r, s.tokenShed(load, limitS, cred, what, flag, limit, detail))
}

// tokenShed counts and logs a refusal of shedToken and returns its answer.
func (s *Server) tokenShed(load *tokenLoad, limitS *shedding, cred *Credential, what, flag string, limit int64, detail string) *problem {
	sh := &load.shed
	sh.refused.Add(1)
	limitS.refused.Add(1)
	if sh.lastLog.Allow(10 * time.Second) {
		s.log.Warn("refusing requests: one app token's "+what+" hold their share of --"+flag, "token", cred.Name,
			flag, limit, "refused-total", sh.refused.Load())
	}
	p := newProblem(http.StatusServiceUnavailable, codeUnavailable, detail)
	p.retryAfter = 1
	return p
}

// tokenBatchOps counts the n ops of a batch r carries against its app
// token's share of the work in flight: a token's batches hold at most half
// of what the other tokens' batches leave of --max-inflight in ops on this
// node (a batch alone is always taken, as a body is), besides its
// requests' share of --max-inflight. tokenSlot counts
// a batch as one request, so one token's 300 batches of 256 claims put
// 76,800 claims in the leader's queue at once, and another tenant's lone
// claim waited behind them: 1.6 s at the median, 1.3 ms alone (attack on
// loopback, within the token's half of --max-inflight 2048). Past the
// share the batch is answered 503 unavailable, Retry-After: 1, naming the
// token, before any op is decided. release gives the ops back.
func (s *Server) tokenBatchOps(r *http.Request, n int) (release func(), p *problem) {
	cred := credentialOf(r)
	limit := int64(s.cfg.Limits.MaxInFlight)
	if cred == nil || cred.Role != RoleApp || limit <= 0 || n <= 0 {
		return func() {}, nil
	}
	load, all := s.tokenLoadOf(cred.Name), &s.guards.appLoad
	ops := int64(n)
	release = func() { load.batchOps.Add(-ops); all.batchOps.Add(-ops) }
	mine, total := load.batchOps.Add(ops), all.batchOps.Add(ops)
	if share := max(tokenShare(limit, mine, total), 1); mine > share && mine != ops {
		release()
		return nil, s.tokenShed(load, &s.guards.inFlightS, cred, "batch operations", "max-inflight", limit, fmt.Sprintf(
			"the token %q has %d batch operations in flight on node %s, and this batch's %d would take it past half of what other tokens' batch operations leave of the most requests it handles at once (--max-inflight %d), so that other tokens' requests still go; nothing was decided, retry shortly",
			cred.Name, mine-ops, s.store.Self().ID, ops, limit))
	}
	return release, nil
}

// BodyBytesInUse is the bytes of request bodies the node holds now, as
// --max-inflight-bytes counts them, for metrics.
func (s *Server) BodyBytesInUse() int64 { return s.guards.bodyBytes.Load() }

// RefusedBodyBytes is how many requests were refused for
// --max-inflight-bytes.
func (s *Server) RefusedBodyBytes() int64 { return s.guards.bodyS.refused.Load() }

// bodyHeld is what a request's body counts against --max-inflight-bytes:
// its Content-Length; Limits.MaxRequestBytes when it has none (chunked),
// the most it may grow to; nothing when it is over that, refused 413
// unread (readBody), or when it has no body. A body larger than the whole
// bound counts as the bound, so that it is still taken, alone.
func (s *Server) bodyHeld(r *http.Request) int64 {
	if r.Body == nil || r.Body == http.NoBody {
		return 0
	}
	max := s.cfg.Limits.MaxRequestBytes
	n := r.ContentLength
	switch {
	case n > max:
		return 0
	case n < 0:
		n = max
	}
	return min(n, s.cfg.Limits.MaxInFlightBytes)
}

// InFlight is the number of requests being handled now (/healthz and
// /readyz aside), for metrics.
func (s *Server) InFlight() int64 { return s.guards.inFlight.Load() }

// RefusedInFlight is how many requests were refused for --max-inflight.
func (s *Server) RefusedInFlight() int64 { return s.guards.inFlightS.refused.Load() }

// Probe reports the routes probes use, /healthz and /readyz: never refused
// for load, and all that serve's --health-addr listener serves.
func Probe(r *http.Request) bool {
	return r.URL.Path == "/healthz" || r.URL.Path == "/readyz"
}

// shield applies the limits above, then next.
func (s *Server) shield(w http.ResponseWriter, r *http.Request, next http.Handler) {
	lc := limitedConnOf(r.Context())
	if lc != nil && lc.overflow() {
		w.Header().Set("Connection", "close")
		if !Probe(r) {
			p := newProblem(http.StatusServiceUnavailable, codeUnavailable, "too many open connections; this one only serves /healthz and /readyz")
			p.retryAfter = 1
			refuseNow(w, r, p)
			return
		}
	}
	if len(r.TransferEncoding) > 0 {
		w.Header().Set("Connection", "close")
		if both, _ := lc.clte(); both {
			refuseNow(w, r, invalid("a request may not carry both Content-Length and Transfer-Encoding"))
			return
		}
	}
	if !Probe(r) {
		max := int64(s.cfg.Limits.MaxInFlight)
		if max > 0 {
			n := s.guards.inFlight.Add(1)
			defer s.guards.inFlight.Add(-1)
			if n > max {
				s.shed(w, r, &s.guards.inFlightS, "too many in flight", "max-inflight", max,
					fmt.Sprintf("the node is handling %d requests, the most it takes at once (--max-inflight); retry shortly", max))
				return
			}
		}
		if max := s.cfg.Limits.MaxInFlightBytes; max > 0 {
			if n := s.bodyHeld(r); n > 0 {
				// Held until the answer is written: the raw body is kept
				// for forwarding to the leader (onLeader), and what it
				// decodes to as long as the handler runs.
				defer s.guards.bodyBytes.Add(-n)
				if s.guards.bodyBytes.Add(n) > max {
					s.shed(w, r, &s.guards.bodyS, "request bodies held at once past --max-inflight-bytes", "max-inflight-bytes", max,
						fmt.Sprintf("the node holds as many request bodies as it takes at once (%d bytes, --max-inflight-bytes); nothing was decided, retry shortly", max))
					return
				}
			}
		}
	}
	if d := s.cfg.Limits.BodyReadTimeout; d > 0 && r.Body != nil && r.Body != http.NoBody {
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(d)) == nil {
			r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc, timeout: d}
		}
	}
	if (lc == nil || !lc.overflow()) && !streams(r) {
		// A headroom connection keeps its own short deadline.
		w = &answerWriter{ResponseWriter: w, timeout: s.answerWriteTimeout()}
	}
	next.ServeHTTP(w, r)
}

// DefaultAnswerWriteTimeout is the default of Config.AnswerWriteTimeout.
const DefaultAnswerWriteTimeout = 30 * time.Second

func (s *Server) answerWriteTimeout() time.Duration {
	if s.cfg.AnswerWriteTimeout > 0 {
		return s.cfg.AnswerWriteTimeout
	}
	return DefaultAnswerWriteTimeout
}

// streams reports the routes whose answer may take as long as it needs to
// send: a snapshot download, and the profiles and traces of --pprof.
func streams(r *http.Request) bool {
	return r.URL.Path == "/v1/admin/snapshot" || strings.HasPrefix(r.URL.Path, "/debug/pprof/")
}

// answerWriter gives the client a time to take the answer, from when the
// handler starts it. Without one, a client that sent requests and read
// nothing held the handler in a Write (and its --max-inflight slot), or
// the connection in net/http's flush after it, for ever: enough such
// clients shut every other one out. net/http clears the deadline once the
// answer is flushed, so a kept-alive connection starts its next request
// without one.
type answerWriter struct {
	http.ResponseWriter
	timeout time.Duration
	armed   bool
}

func (a *answerWriter) arm() {
	if !a.armed {
		a.armed = true
		_ = http.NewResponseController(a.ResponseWriter).SetWriteDeadline(time.Now().Add(a.timeout))
	}
}

func (a *answerWriter) WriteHeader(code int) {
	if code >= 200 {
		a.arm()
	}
	a.ResponseWriter.WriteHeader(code)
}

func (a *answerWriter) Write(b []byte) (int, error) {
	a.arm()
	return a.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (a *answerWriter) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// refuseNow answers p without reading the request's body, and closes the
// connection rather than draining the body: net/http drains up to 256 KiB
// of an unread body after the handler, even on a connection it then
// closes, and a slow body would hold the connection for that long. An
// expired read deadline makes the drain fail at once (HTTP/2 does not
// support it and resets the stream instead: nothing to do).
func refuseNow(w http.ResponseWriter, r *http.Request, p *problem) {
	dropBody(w, r)
	writeProblem(w, p)
}

// dropBody makes the answer to come close the connection rather than
// wait for, or drain, a body the handler will not read (see refuseNow).
func dropBody(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	}
}

// deadlineBody clears the body's read deadline once the body is read to
// its end, and names the limit when a body does not arrive in time.
type deadlineBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	timeout time.Duration
	once    sync.Once
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.once.Do(func() { b.rc.SetReadDeadline(time.Time{}) })
	}
	// On any other error the deadline stays: the server then gives up
	// draining the rest of the body at once, answers and closes.
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = fmt.Errorf("the body did not arrive within %s (--body-read-timeout)", b.timeout)
	}
	return n, err
}

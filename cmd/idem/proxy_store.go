package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/internal/hostport"
)

// storeFailover is the proxy's transport to the store: one idem node at a
// time, the next one when a node cannot be reached or answers 503. Every
// call the middleware makes is safe to send again to another node: a claim
// carries its claim_id (a repeat gets the same claim back), and complete,
// release and extend are idempotent for their token. The node that last
// answered is tried first, so a dead node costs one failed dial, not one
// per request.
type storeFailover struct {
	nodes []*url.URL
	rt    http.RoundTripper
	cur   atomic.Int64
}

// parseStores reads --store: comma-separated host:port or URLs. With TLS
// settings a host:port means https, as for every command that calls a node.
func parseStores(list string, withTLS bool) ([]*url.URL, error) {
	var out []*url.URL
	seen := map[string]bool{}
	for _, part := range strings.Split(list, ",") {
		s := strings.TrimSpace(part)
		if s == "" {
			continue
		}
		if !strings.Contains(s, "://") {
			if withTLS {
				s = "https://" + s
			} else {
				s = "http://" + s
			}
		}
		u, err := url.Parse(s)
		switch {
		case strings.Contains(part, "@") && (err != nil || u.User == nil):
			// A password of digits (or none) before '/', '?' or '#'
			// parses as a port, the rest as a path, query or fragment.
			// url.Parse's error quotes the address, password included.
			return nil, errors.New("an address with user info is not a URL: want host:port or scheme://host:port")
		case err != nil:
			if hint := ipv6Hint(strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(part), "http://"), "https://")); hint != "" {
				return nil, fmt.Errorf("%q: %s", part, hint)
			}
			return nil, fmt.Errorf("%q: %w", part, err)
		case u.User != nil:
			return nil, fmt.Errorf("%q: an address takes no user info (the store token authenticates: --store-token-file)", u.Redacted())
		case u.Scheme != "http" && u.Scheme != "https":
			return nil, fmt.Errorf("%q: the scheme must be http or https", part)
		case u.Host == "":
			return nil, fmt.Errorf("%q: no host", part)
		case u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/"):
			return nil, fmt.Errorf("%q: want host:port or scheme://host:port", part)
		case u.Port() == "":
			return nil, fmt.Errorf("%q: no port (idem serve listens on 7070 by default)", part)
		case checkHostPort(u.Host) != nil:
			// 127.0.0.1:99999 was accepted: the proxy ran and answered
			// every keyed request 503.
			return nil, fmt.Errorf("%q: port %q is not a number from 1 to 65535", part, u.Port())
		case withTLS && u.Scheme == "http":
			return nil, fmt.Errorf("%q: TLS settings given (--ca-file, --cert-file) for an http:// address: use https://", part)
		}
		u.Path = ""
		if seen[u.String()] {
			return nil, fmt.Errorf("%q is given twice", part)
		}
		seen[u.String()] = true
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, errors.New("no address given")
	}
	return out, nil
}

func newStoreFailover(nodes []*url.URL, tlsCfg *tls.Config) *storeFailover {
	return &storeFailover{nodes: nodes, rt: &http.Transport{
		DialContext: (&net.Dialer{
			// A node that does not answer a dial within a second is
			// skipped for the next one: the caller is waiting.
			Timeout:   time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		TLSClientConfig:     tlsCfg,
		TLSHandshakeTimeout: 2 * time.Second,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}}
}

// base is the URL the store client is made with; RoundTrip replaces its
// host by the node it picks.
func (f *storeFailover) base() string { return f.nodes[0].String() }

// follow makes the leader an answer names the node tried first, when it
// is one of --store's: a follower's forwarding costs both nodes a second
// HTTP exchange per write. Compared as spelled, else as a dialer reads
// them (hostport.Key), as the Go client does.
func (f *storeFailover) follow(leader string) {
	if leader == "" {
		return
	}
	for i, u := range f.nodes {
		if u.Host == leader {
			f.cur.Store(int64(i))
			return
		}
	}
	for i, u := range f.nodes {
		if k := hostport.Key(leader, u.Scheme); k != "" && k == hostport.Key(u.Host, u.Scheme) {
			f.cur.Store(int64(i))
			return
		}
	}
}

// RoundTrip sends req to the current node and fails over to the others,
// each once, when a node cannot be reached or answers 503.
func (f *storeFailover) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.GetBody != nil {
		// Each attempt sends its own copy from GetBody; the original is
		// closed here, as a RoundTripper must.
		defer req.Body.Close()
	}
	start := int(f.cur.Load())
	var lastErr error
	var last *http.Response
	tried := -1
	for i := range f.nodes {
		if err := req.Context().Err(); err != nil {
			break
		}
		idx := (start + i) % len(f.nodes)
		n := f.nodes[idx]
		r := req.Clone(req.Context())
		r.URL.Scheme, r.URL.Host, r.Host = n.Scheme, n.Host, ""
		if req.Body != nil && req.Body != http.NoBody {
			if req.GetBody == nil {
				return f.rt.RoundTrip(r) // cannot be sent twice: one node only
			}
			b, err := req.GetBody()
			if err != nil {
				return nil, fmt.Errorf("proxy: store request body: %w", err)
			}
			r.Body = b
		}
		tried = idx
		resp, err := f.rt.RoundTrip(r)
		if err == nil && resp.StatusCode != http.StatusServiceUnavailable {
			if last != nil {
				last.Body.Close()
			}
			f.cur.CompareAndSwap(int64(start), int64(idx))
			f.follow(resp.Header.Get(client.LeaderHeader))
			return resp, nil
		}
		if last != nil {
			last.Body.Close()
		}
		last, lastErr = nil, err
		if err == nil {
			// Keep the 503 to pass on if no node does better; read it
			// whole so the connection can be reused.
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			resp.Body = io.NopCloser(strings.NewReader(string(b)))
			last = resp
		} else {
			lastErr = fmt.Errorf("store %s: %w", n.Host, err)
		}
	}
	if last != nil {
		return last, nil
	}
	if lastErr == nil {
		lastErr = req.Context().Err()
	}
	if ctx := req.Context(); lastErr != nil && ctx.Err() != nil && !cancelledByCaller(ctx) && tried >= 0 {
		// Sent, perhaps, but not answered before the deadline: a stopped
		// or wedged node (SIGSTOP, a stalled disk) still has its kernel
		// accept connections, so it is never skipped as unreachable. Left
		// first, every keyed request waited out --store-timeout on it and
		// was answered 503 for as long as it stayed stopped, while the
		// others had elected a leader in seconds. Later calls start at the
		// next node (an answer naming the leader brings them back).
		f.cur.CompareAndSwap(int64(start), int64((tried+1)%len(f.nodes)))
	}
	return nil, lastErr
}

// cancelledByCaller reports whether ctx ended by a cancel rather than a
// deadline (a caller that went away says nothing of the node); a Batcher
// abandoning a batch cancels with its callers' cause.
func cancelledByCaller(ctx context.Context) bool {
	return errors.Is(ctx.Err(), context.Canceled) && !errors.Is(context.Cause(ctx), context.DeadlineExceeded)
}

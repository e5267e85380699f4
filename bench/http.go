package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/internal/hostport"
)

// HTTPDriver speaks idem's HTTP API (docs/API.md) to one or several
// nodes: each request goes to the leader once an answer has named it
// (the Idem-Leader header), as the Go client sends it; to a node picked
// at random until then, and after the leader could not be reached.
type HTTPDriver struct {
	addrs  []string
	leader atomic.Int32 // index in addrs + 1; 0: not known
	token  string
	client *http.Client
	scheme string // http, or https after UseTLS
}

// NewHTTPDriver returns a driver for the nodes at addrs (host:port, an
// "http://" prefix is accepted). authToken is sent as a bearer token when
// set. Connections are kept alive, up to 1,024 idle ones per node.
func NewHTTPDriver(addrs []string, authToken string) *HTTPDriver {
	clean := make([]string, 0, len(addrs))
	for _, a := range addrs {
		a = strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(a), "http://"), "https://"), "/")
		if a != "" {
			clean = append(clean, a)
		}
	}
	// The Go client's own transport (client.NewTransport): the load is
	// what a service using the client sends, and its cost is the client's.
	return &HTTPDriver{addrs: clean, token: authToken, client: &http.Client{Transport: client.NewTransport(nil)}, scheme: "http"}
}

// UseTLS makes the driver speak HTTPS with cfg; call it before the load.
func (d *HTTPDriver) UseTLS(cfg *tls.Config) {
	d.client.Transport = client.NewTransport(cfg)
	d.scheme = "https"
}

// Close drops the idle connections.
func (d *HTTPDriver) Close() error {
	d.client.CloseIdleConnections()
	return nil
}

const benchFingerprint = "9f86d081884c7d65"

// requestTimeout bounds one request.
const requestTimeout = 30 * time.Second

// Claim is POST /v1/claim: 201 won, 409 in_progress lost, 200 replay.
func (d *HTTPDriver) Claim(ctx context.Context, s Scope, claimID string) (ClaimResult, error) {
	body := fmt.Sprintf(`{"principal":%q,"endpoint":%q,"key":%q,"fingerprint":%q,"claim_id":%q}`,
		s.Principal, s.Endpoint, s.Key, benchFingerprint, claimID)
	status, b, err := d.do(ctx, http.MethodPost, "/v1/claim", body)
	if err != nil {
		return ClaimResult{}, err
	}
	switch status {
	case http.StatusCreated:
		var c struct {
			Token          string    `json:"token"`
			CreatedAt      time.Time `json:"created_at"`
			LeaseExpiresAt time.Time `json:"lease_expires_at"`
		}
		if json.Unmarshal(b, &c) != nil || c.Token == "" {
			return ClaimResult{}, Definitely("bad_answer", fmt.Errorf("201 without a token: %.200s", b))
		}
		return ClaimResult{Outcome: Won, Token: c.Token, Lease: c.LeaseExpiresAt.Sub(c.CreatedAt)}, nil
	case http.StatusOK:
		return ClaimResult{Outcome: Replay}, nil
	case http.StatusConflict:
		if code := problemCode(b); code != "in_progress" {
			return ClaimResult{}, Definitely(orStatus(code, status), nil)
		}
		return ClaimResult{Outcome: Lost}, nil
	}
	return ClaimResult{}, statusError(status, b)
}

// Complete is POST /v1/complete with a 201 application/json response.
func (d *HTTPDriver) Complete(ctx context.Context, s Scope, token string, body []byte) error {
	enc, _ := json.Marshal(body) // a JSON string holding base64
	req := fmt.Sprintf(`{"principal":%q,"endpoint":%q,"key":%q,"token":%q,"response":{"status":201,"content_type":"application/json","body":%s}}`,
		s.Principal, s.Endpoint, s.Key, token, enc)
	status, b, err := d.do(ctx, http.MethodPost, "/v1/complete", req)
	if err != nil {
		return err
	}
	if status == http.StatusOK {
		return nil
	}
	return statusError(status, b)
}

// Lookup is GET /v1/records (linearizable): 200 found, 404 not found.
func (d *HTTPDriver) Lookup(ctx context.Context, s Scope) (bool, error) {
	q := url.Values{"principal": {s.Principal}, "endpoint": {s.Endpoint}, "key": {s.Key}}
	status, b, err := d.do(ctx, http.MethodGet, "/v1/records?"+q.Encode(), "")
	if err != nil {
		return false, err
	}
	switch status {
	case http.StatusOK:
		return true, nil
	case http.StatusNotFound:
		if code := problemCode(b); code == "not_found" || code == "" {
			return false, nil
		}
	}
	return false, statusError(status, b)
}

// statusError turns an unexpected answer into an *Error named by the
// problem document's code (or the status): 503 is indeterminate.
func statusError(status int, b []byte) error {
	code := orStatus(problemCode(b), status)
	if status == http.StatusServiceUnavailable || status == http.StatusBadGateway || status == http.StatusGatewayTimeout {
		return Indeterminately(code, nil)
	}
	if refusedStatus(status) {
		return Refusal(code, nil)
	}
	return Definitely(code, nil)
}

func orStatus(code string, status int) string {
	if code != "" {
		return code
	}
	return strconv.Itoa(status)
}

func problemCode(b []byte) string {
	var p struct{ Code string }
	if json.Unmarshal(b, &p) != nil {
		return ""
	}
	return p.Code
}

func (d *HTTPDriver) do(ctx context.Context, method, path, body string) (int, []byte, error) {
	if len(d.addrs) == 0 {
		return 0, nil, Definitely("no_address", errors.New("no node address"))
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	idx := 0
	if len(d.addrs) > 1 {
		if l := int(d.leader.Load()); l > 0 {
			idx = l - 1
		} else {
			idx = rand.IntN(len(d.addrs))
		}
	}
	addr := d.addrs[idx]
	// A deadline through the context, not http.Client.Timeout, which
	// starts a goroutine per request (as the Go client does).
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, d.scheme+"://"+addr+path, rd)
	if err != nil {
		return 0, nil, Definitely("request", err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if d.token != "" {
		req.Header.Set("Authorization", "Bearer "+d.token)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		d.leader.CompareAndSwap(int32(idx+1), 0) // try the others
		return 0, nil, Indeterminately("transport", err)
	}
	defer resp.Body.Close()
	if l := resp.Header.Get(client.LeaderHeader); l != "" && len(d.addrs) > 1 {
		l = strings.TrimSuffix(l, "/")
		lk := hostport.Key(l, d.scheme)
		for i, a := range d.addrs {
			if a == l || (lk != "" && lk == hostport.Key(a, d.scheme)) { // [::1] and [0:0::1], a name's case
				d.leader.Store(int32(i + 1))
				break
			}
		}
	} else if resp.StatusCode == http.StatusServiceUnavailable {
		d.leader.CompareAndSwap(int32(idx+1), 0) // it knows no leader: spread again
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, Indeterminately("transport", err)
	}
	return resp.StatusCode, bytes.TrimSpace(b), nil
}

package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"strconv"
	"strings"

	"github.com/idem-store/idem/client"
)

// BatchDriver speaks idem's HTTP API through the Go client's Batcher: the
// calls of every load client are coalesced into POST /v1/batch requests of
// at most maxOps ops, the way a fleet of API servers sharing a client would
// send them. Each call still gets its own answer, judged as HTTPDriver
// judges the single request's.
type BatchDriver struct {
	b *client.Batcher // one for all load clients, of a client of every node
}

// NewBatchDriver returns a driver batching to the nodes at addrs: one
// client of them all, so every batch goes to the leader once an answer has
// named it (a follower would forward it), and one Batcher, so the calls of
// all load clients share batches.
func NewBatchDriver(addrs []string, authToken string, maxOps int, tlsCfg *tls.Config) (*BatchDriver, error) {
	var list []string
	for _, a := range addrs {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if tlsCfg != nil && !strings.Contains(a, "://") {
			a = "https://" + a
		}
		list = append(list, a)
	}
	if len(list) == 0 {
		return nil, errors.New("bench: --addr names no node")
	}
	opts := []client.Option{client.WithToken(authToken)}
	if tlsCfg != nil {
		opts = append(opts, client.WithTLS(tlsCfg))
	}
	c, err := client.New(strings.Join(list, ","), opts...)
	if err != nil {
		return nil, err
	}
	return &BatchDriver{b: c.NewBatcher(client.BatcherConfig{MaxOps: maxOps})}, nil
}

// Close stops the batcher.
func (d *BatchDriver) Close() error { return d.b.Close() }

// Claim is a claim op: 201 won, 409 in_progress lost, 200 replay.
func (d *BatchDriver) Claim(ctx context.Context, s Scope, claimID string) (ClaimResult, error) {
	res, err := d.b.Claim(ctx, client.ClaimRequest{Principal: s.Principal, Endpoint: s.Endpoint, Key: s.Key,
		Fingerprint: benchFingerprint, ClaimID: claimID})
	switch {
	case errors.Is(err, client.ErrInProgress):
		return ClaimResult{Outcome: Lost}, nil
	case err != nil:
		return ClaimResult{}, clientError(err)
	case res.Outcome == client.OutcomeReplay:
		return ClaimResult{Outcome: Replay}, nil
	}
	return ClaimResult{Outcome: Won, Token: res.Token, Lease: res.LeaseExpiresAt.Sub(res.CreatedAt)}, nil
}

// Complete is a complete op with a 201 application/json response.
func (d *BatchDriver) Complete(ctx context.Context, s Scope, token string, body []byte) error {
	_, err := d.b.Complete(ctx, client.CompleteRequest{Principal: s.Principal, Endpoint: s.Endpoint, Key: s.Key, Token: token,
		Response: client.Response{Status: 201, ContentType: "application/json", Body: body}})
	if err != nil {
		return clientError(err)
	}
	return nil
}

// Lookup is a get op (linearizable).
func (d *BatchDriver) Lookup(ctx context.Context, s Scope) (bool, error) {
	_, err := d.b.Get(ctx, s.Principal, s.Endpoint, s.Key, "")
	switch {
	case errors.Is(err, client.ErrNotFound):
		return false, nil
	case err != nil:
		return false, clientError(err)
	}
	return true, nil
}

// clientError names a client error as statusError names an answer: 503
// and transport failures are indeterminate.
func clientError(err error) error {
	var p *client.Problem
	if !errors.As(err, &p) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return Indeterminately("transport", err)
	}
	code := p.Code
	if code == "" {
		code = strconv.Itoa(p.Status)
	}
	if p.Status == 503 || p.Status == 502 || p.Status == 504 {
		return Indeterminately(code, p)
	}
	if refusedStatus(p.Status) {
		return Refusal(code, p)
	}
	return Definitely(code, p)
}

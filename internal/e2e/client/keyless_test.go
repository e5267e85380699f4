package e2eclient_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/internal/idemtest"
)

// The results of a batch are matched to its callers by place, and most
// carry no key to check them by (checkScopes looks at records alone): a
// won claim's token, an extend's lease, a refusal. Two such results
// swapped would go to the wrong callers unnoticed, a token to the caller
// of another key. Nothing in the Batcher, the node's batch (runBatch,
// raftfsm's Batch) or its answer swaps them: callers whose ops mix won
// claims, refusals and extends in the same batches each get their own,
// here checked by what each result can only be for its op (a token that
// completes only its own key, a lease of the length asked).
func TestBatcherHandsEachCallerItsOwnKeylessResult(t *testing.T) {
	n := idemtest.Start(t, idemtest.Options{})
	c, err := client.New(n.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const callers = 96
	held := make([]string, callers) // the token of held-i, claimed before
	for i := range callers {
		if i%4 == 0 {
			continue
		}
		cl, err := c.Claim(ctx, client.ClaimRequest{Principal: "p", Endpoint: "e", Key: fmt.Sprint("held-", i), Fingerprint: "aa", LeaseMs: 60_000})
		if err != nil {
			t.Fatal(err)
		}
		held[i] = cl.Token
	}
	b := c.NewBatcher(client.BatcherConfig{Linger: 20 * time.Millisecond, MaxOps: 32})
	defer b.Close()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			<-start
			key := fmt.Sprint("held-", i)
			switch i % 4 {
			case 0: // a won claim: its token completes its own key alone
				key = fmt.Sprint("new-", i)
				cl, err := b.Claim(ctx, client.ClaimRequest{Principal: "p", Endpoint: "e", Key: key, Fingerprint: "aa", ClaimID: key})
				if err != nil {
					t.Errorf("caller %d: claim: %v", i, err)
					return
				}
				if _, err := c.Complete(ctx, client.CompleteRequest{Principal: "p", Endpoint: "e", Key: key, Token: cl.Token,
					Response: client.Response{Status: 201, Body: []byte(key)}}); err != nil {
					t.Errorf("caller %d: the token its claim got does not complete its key: %v", i, err)
				}
			case 1: // refused: another attempt holds the key
				_, err := b.Claim(ctx, client.ClaimRequest{Principal: "p", Endpoint: "e", Key: key, Fingerprint: "aa"})
				if !errors.Is(err, client.ErrInProgress) {
					t.Errorf("caller %d: claim of a held key: %v, want in_progress", i, err)
				}
			case 2: // an extend of its own lease, by a length of its own
				lease := time.Duration(10+i) * time.Second
				asked := time.Now()
				res, err := b.Extend(ctx, client.ExtendRequest{Principal: "p", Endpoint: "e", Key: key, Token: held[i], LeaseMs: lease.Milliseconds()})
				if err != nil {
					t.Errorf("caller %d: extend: %v", i, err)
					return
				}
				if d := res.LeaseExpiresAt.Sub(asked); d < lease-2*time.Second || d > lease+2*time.Second {
					t.Errorf("caller %d: extended by %v, asked %v: another caller's result", i, d, lease)
				}
			case 3: // refused: a token of another key
				_, err := b.Release(ctx, client.ReleaseRequest{Principal: "p", Endpoint: "e", Key: key, Token: held[i-1]})
				if !errors.Is(err, client.ErrTokenMismatch) {
					t.Errorf("caller %d: release with another key's token: %v, want token_mismatch", i, err)
				}
			}
		})
	}
	close(start)
	wg.Wait()
}

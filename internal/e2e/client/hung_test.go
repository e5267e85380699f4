package e2eclient_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idem-store/idem/client"
	"github.com/idem-store/idem/internal/idemtest"
)

// A client of several nodes whose current node takes requests and never
// answers moves on: the request that timed out is not sent again, but the
// next ones go to the next node. Bug: only a refused dial or a 503 moved
// the client on, so with the leader stopped (kill -STOP) every request of
// every caller went to it and waited out its deadline, for as long as the
// process stayed stopped, while the other nodes had elected a new leader.
func TestSeveralNodesLeaveANodeThatDoesNotAnswer(t *testing.T) {
	n := idemtest.Start(t, idemtest.Options{})
	c, err := client.New(idemtest.HungNode(t) + "," + n.URL)
	if err != nil {
		t.Fatal(err)
	}
	claim := func(i int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		_, err := c.Claim(ctx, client.ClaimRequest{Principal: "p", Endpoint: "e", Key: fmt.Sprint("k", i), Fingerprint: "aa", ClaimID: "a"})
		return err
	}
	if err := claim(0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("claim sent to the node that does not answer: got %v, want its deadline", err)
	}
	for i := 1; i <= 3; i++ {
		if err := claim(i); err != nil {
			t.Fatalf("claim %d after the node did not answer: %v (sent to %s)", i, err, c.Addr())
		}
	}
	// The Batcher, whose batches go out with their own deadline, too.
	c, err = client.New(idemtest.HungNode(t) + "," + n.URL)
	if err != nil {
		t.Fatal(err)
	}
	b := c.NewBatcher(client.BatcherConfig{Timeout: 300 * time.Millisecond})
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req := client.ClaimRequest{Principal: "p", Endpoint: "e", Key: "kb", Fingerprint: "aa", ClaimID: "a"}
	if _, err := b.Claim(ctx, req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("batch sent to the node that does not answer: got %v, want its deadline", err)
	}
	if _, err := b.Claim(ctx, req); err != nil {
		t.Fatalf("batch after the node did not answer: %v", err)
	}
}

// A Batcher whose batch went to a node that takes requests and never
// answers gives the batch up once all its callers have gone, and moves on
// to the next node. Bug: the batch request was kept for the Batcher's
// Timeout (30 s by default) whatever its callers' deadlines, so with the
// leader stopped every call failed for that long: the batches held the
// slots (MaxInFlight) and the client stayed on the stopped node.
func TestBatcherGivesUpABatchItsCallersLeft(t *testing.T) {
	n := idemtest.Start(t, idemtest.Options{})
	c, err := client.New(idemtest.HungNode(t) + "," + n.URL)
	if err != nil {
		t.Fatal(err)
	}
	b := c.NewBatcher(client.BatcherConfig{MaxInFlight: 1}) // default Timeout: 30 s
	defer b.Close()
	claim := func(key string) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := b.Claim(ctx, client.ClaimRequest{Principal: "p", Endpoint: "e", Key: key, Fingerprint: "aa", ClaimID: "a"})
		return err
	}
	if err := claim("k0"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("claim sent to the node that does not answer: got %v, want its deadline", err)
	}
	for i := 1; i <= 3; i++ {
		if err := claim(fmt.Sprint("k", i)); err != nil {
			t.Fatalf("claim %d after its batch's callers had gone: %v (client at %s)", i, err, c.Addr())
		}
	}
}

// A call whose context had already ended is not sent, and leaves the
// client on its node: only a request that reached a node and failed says
// something of it. Bug (with the move-on above): a careless caller's
// already cancelled calls moved the client off a healthy leader, here
// onto a node that does not answer.
func TestSeveralNodesStayAfterACallThatWasNeverSent(t *testing.T) {
	n := idemtest.Start(t, idemtest.Options{})
	c, err := client.New(n.URL + "," + idemtest.HungNode(t))
	if err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	req := client.ClaimRequest{Principal: "p", Endpoint: "e", Key: "k", Fingerprint: "aa", ClaimID: "a"}
	if _, err := c.Claim(done, req); !errors.Is(err, context.Canceled) {
		t.Fatalf("claim with an ended context: got %v, want context.Canceled", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := c.Get(ctx, "p", "e", "k", ""); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("get after a claim that was never sent: got %v, want not_found (client at %s)", err, c.Addr())
	}
	if _, err := c.Claim(ctx, req); err != nil {
		t.Fatalf("claim after one that was never sent: %v (client at %s)", err, c.Addr())
	}
}

// A call that could not even be made (a nil context, which net/http
// refuses before any connection) leaves the client on its node, as an
// already ended context does. Bug: the refusal took the "sent, not
// answered" path and moved the client off a healthy leader, here onto a
// node that does not answer, where the next caller waited out its deadline.
func TestSeveralNodesStayAfterACallThatCouldNotBeMade(t *testing.T) {
	n := idemtest.Start(t, idemtest.Options{})
	c, err := client.New(n.URL + "," + idemtest.HungNode(t))
	if err != nil {
		t.Fatal(err)
	}
	var nilCtx context.Context // a careless caller's
	if _, err := c.Get(nilCtx, "p", "e", "k", ""); err == nil {
		t.Fatal("get with a nil context: no error")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := c.Get(ctx, "p", "e", "k", ""); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("get after one that could not be made: got %v, want not_found (client at %s)", err, c.Addr())
	}
}

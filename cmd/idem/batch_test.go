package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/client"
)

// batchOps is the body of a batch of ops.
func batchOps(ops ...string) string { return `{"ops":[` + joinComma(ops) + `]}` }

func joinComma(s []string) string {
	out := ""
	for i, v := range s {
		if i > 0 {
			out += ","
		}
		out += v
	}
	return out
}

func batchOp(op, key string, extra string) string {
	return fmt.Sprintf(`{"op":%q,"principal":%q,"endpoint":%q,"key":%q%s}`, op, cPrincipal, cEndpoint, key, extra)
}

// A follower forwards a batch to the leader whole, and passes the leader's
// per-op answers through.
func TestBatchThroughAFollower(t *testing.T) {
	c := newCluster(t, viaJoin, nil, nil)
	leader := c.leader()
	fs := c.others(leader)
	fp := fmt.Sprintf(`,"fingerprint":%q`, cFinger)
	a := call("POST", fs[0].http, "/v1/batch", batchOps(
		batchOp("claim", "fb-1", fp), batchOp("claim", "fb-2", fp), batchOp("claim", "fb-1", fp), batchOp("get", "fb-1", "")))
	require.NoError(t, a.err)
	require.Equal(t, 200, a.code, "%s", a)
	var out struct {
		Results []struct {
			Status int
			Body   json.RawMessage
		}
	}
	require.NoError(t, json.Unmarshal(a.body, &out))
	got := []int{}
	for _, r := range out.Results {
		got = append(got, r.Status)
	}
	require.Equal(t, []int{201, 201, 409, 200}, got, "%s", a)
	// A stale read first does not keep the writes after it from the leader.
	a = call("POST", fs[1].http, "/v1/batch", batchOps(
		batchOp("get", "fb-3", `,"consistency":"stale"`), batchOp("claim", "fb-3", fp), batchOp("get", "fb-3", "")))
	require.Equal(t, 200, a.code, "%s", a)
	out.Results = nil
	require.NoError(t, json.Unmarshal(a.body, &out))
	got = got[:0]
	for _, r := range out.Results {
		got = append(got, r.Status)
	}
	require.Equal(t, []int{404, 201, 200}, got, "%s", a)
	// The other follower reads both records (linearizable: via the leader).
	for _, k := range []string{"fb-1", "fb-2"} {
		a := call("GET", fs[1].http, "/v1/records?principal="+cPrincipal+"&endpoint=POST%20/payments&key="+k, "")
		require.Equal(t, 200, a.code, "%s", a)
	}
	// Once every member has said it knows batch entries (asked again every
	// second while one has not), a batch is one raft entry: its claims'
	// tokens share their index. (Asked every 10 s, a new cluster decided
	// its first 10 s of batches one entry per op: 1,509 claims/s.)
	i := 0
	waitFor(t, 5*time.Second, "a batch decided as one raft entry", func() (bool, string) {
		i++
		a := call("POST", fs[0].http, "/v1/batch", batchOps(
			batchOp("claim", fmt.Sprintf("one-entry-%d-a", i), fp), batchOp("claim", fmt.Sprintf("one-entry-%d-b", i), fp)))
		if a.err != nil || a.code != 200 {
			return false, a.String()
		}
		var out struct {
			Results []struct{ Body struct{ Token string } }
		}
		if err := json.Unmarshal(a.body, &out); err != nil || len(out.Results) != 2 {
			return false, a.String()
		}
		x, _, _ := strings.Cut(out.Results[0].Body.Token, ".")
		y, _, _ := strings.Cut(out.Results[1].Body.Token, ".")
		return x != "" && x == y, a.String()
	})
}

// kill -9 of a node under batched load loses no acknowledged claim: every
// claim a batch answered 201 is there after the restart, in progress, and
// its key still refuses a second claim.
func TestKill9DuringBatchedLoadKeepsAcknowledgedClaims(t *testing.T) {
	dir := t.TempDir()
	httpAddr, raftAddr := freePort(t), freePort(t)
	p := start(t, dir, httpAddr, raftAddr)
	c, err := client.New(httpAddr)
	require.NoError(t, err)
	b := c.NewBatcher(client.BatcherConfig{MaxOps: 64})
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	acked := map[string]int{} // key -> attempt
	var wg sync.WaitGroup
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				key := fmt.Sprintf("crash-%d-%d", w, i)
				res, err := b.Claim(ctx, client.ClaimRequest{Principal: cPrincipal, Endpoint: cEndpoint, Key: key, Fingerprint: cFinger})
				if err != nil {
					continue // the node is gone, or the answer never came: not acknowledged
				}
				mu.Lock()
				acked[key] = res.Attempt
				mu.Unlock()
			}
		}()
	}
	waitFor(t, 20*time.Second, "acknowledged batched claims", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 500, fmt.Sprint(len(acked))
	})
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	p.wait()
	cancel()
	wg.Wait()
	b.Close()

	start(t, dir, httpAddr, raftAddr)
	b = c.NewBatcher(client.BatcherConfig{})
	defer b.Close()
	t.Logf("%d claims acknowledged before kill -9", len(acked))
	var missing []string
	var cwg sync.WaitGroup
	var cmu sync.Mutex
	sem := make(chan struct{}, 64)
	for key, attempt := range acked {
		cwg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; cwg.Done() }()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			rec, err := b.Get(ctx, cPrincipal, cEndpoint, key, "")
			_, again := b.Claim(ctx, client.ClaimRequest{Principal: cPrincipal, Endpoint: cEndpoint, Key: key, Fingerprint: cFinger, ClaimID: "after"})
			if err != nil || rec.State != client.StateInProgress || rec.Attempt != attempt || !errors.Is(again, client.ErrInProgress) {
				cmu.Lock()
				missing = append(missing, fmt.Sprintf("%s: %v %+v; claim again: %v", key, err, rec, again))
				cmu.Unlock()
			}
		}()
	}
	cwg.Wait()
	require.Empty(t, missing, "acknowledged claims lost or changed by kill -9")
}

// idem bench --batch drives the load through the client's batcher and its
// correctness check holds.
func TestBenchBatchedChecksCorrectness(t *testing.T) {
	httpAddr := freePort(t)
	start(t, t.TempDir(), httpAddr, freePort(t))
	out, err := exec.Command(binary, "bench", "--addr", httpAddr, "--duration", "2s", "--warmup", "0s", "--batch", "32",
		"--concurrency", "16", "--mix", "fresh=40,dup=20,complete=20,lookup=20", "--quiet").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "batches of up to 32 ops")
	require.Contains(t, string(out), "correctness: ok")
	require.Contains(t, string(out), "errors: none")
}

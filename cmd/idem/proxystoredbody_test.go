package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The proxy's --max-stored-body 1TB was taken without a word: each keyed
// request holds up to it of its answer, and no store stores more than
// 62 MiB. As serve's sizes: past the machine's memory it is refused (a
// typo), past the most a store takes it is lowered to it with a warning,
// and one that --max-inflight requests holding it at once would take more
// memory than the machine has for is warned of.
func TestProxyMaxStoredBodyIsBoundedAsTheStoreLimit(t *testing.T) {
	mem := physicalMemory()
	if mem > 0 && mem < 1e12 {
		// Taken, it ran until ctx ended.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		var stdout, stderr bytes.Buffer
		code := runProxy(ctx, []string{"--listen", freePort(t), "--upstream", "http://" + freePort(t), "--store", freePort(t), "--max-stored-body", "1TB"}, &stdout, &stderr)
		require.Equal(t, 2, code, stderr.String())
		require.Contains(t, stderr.String(), "idem proxy: --max-stored-body 1TB is more than this machine's memory")
	}

	px := startProxy(t, "--upstream", "http://"+freePort(t), "--store", freePort(t), "--max-stored-body", "100MiB")
	waitForLine(t, px.logs, "--max-stored-body 104857600 lowered to 65011712, the maximum: a store stores no larger body")
	if mem > 0 && mem < 310<<30 {
		waitForLine(t, px.logs, "--max-stored-body 62MiB held by each of --max-inflight 1024 requests at once can take about 310.0GiB of memory")
	}

	// What fits is said nothing of.
	px = startProxy(t, "--upstream", "http://"+freePort(t), "--store", freePort(t), "--max-stored-body", "1MiB", "--max-inflight", "16")
	waitForLine(t, px.logs, "does not answer its health check") // logged after the notes
	require.NotContains(t, px.logs.String(), "--max-stored-body")
}

// The warning counted a held answer twice (kept, and sent to the store),
// while the proxy holds it five times over as its complete is sent: the
// middleware's copy and three of its base64 in the complete's JSON. 62 MiB
// by --max-inflight 150 is 18.2 GiB counted twice, under a 24 GiB machine,
// and was said nothing of, though 4 requests of 40 MiB answers took a
// proxy's live heap to 779 MB (an operator walk of the start warnings).
func TestProxyStoredBodyMemoryCountsEveryCopyOfTheAnswer(t *testing.T) {
	note := storedBodyMemory(62<<20, 150, 24<<30)
	require.Contains(t, note, "--max-stored-body 62MiB held by each of --max-inflight 150 requests at once can take about 45.4GiB of memory (5 times their bytes")
	require.Empty(t, storedBodyMemory(62<<20, 60, 24<<30), "60 requests of 62 MiB at 5 times fit 24 GiB")
	require.Empty(t, storedBodyMemory(62<<20, 150, 0), "memory unknown")
}

package raftfsm

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/engine"
)

// The ballast's removal line read free-bytes-before from the cached free
// space after the removal: proposals, appends and waits read the disk
// again without the guard's lock, and one that read between the removal
// and the line made it say the space the removal had just given back (an
// operator walk of docs/DISK.md's ballast). It is read before now.
func TestBallastRemovalLineSaysTheSpaceBeforeIt(t *testing.T) {
	mnt := smallTmpfs(t, "64m")
	var mu sync.Mutex
	var out bytes.Buffer
	g := &diskGuard{dir: mnt, ballast: filepath.Join(mnt, "ballast"), log: slog.New(slog.NewJSONHandler(lockedWriter{&mu, &out}, nil))}

	// Another goroutine's reads, as a proposal's room check makes them.
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			g.read()
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()

	const size = 16 << 20
	for i := range 50 {
		require.NoError(t, engine.CreateBallast(g.ballast, size))
		before, err := engine.DiskFree(mnt)
		require.NoError(t, err)
		mu.Lock()
		out.Reset()
		mu.Unlock()
		g.mu.Lock()
		removed := g.releaseLocked("for the test")
		g.mu.Unlock()
		require.True(t, removed)
		mu.Lock()
		var line struct {
			Before uint64 `json:"free-bytes-before"`
		}
		require.NoError(t, json.Unmarshal(out.Bytes(), &line), "%s", out.String())
		mu.Unlock()
		require.Less(t, line.Before, before+size/2, "removal %d: free-bytes-before is the space after the removal (%d before it)", i, before)
	}
}

type lockedWriter struct {
	mu  *sync.Mutex
	out *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.out.Write(p)
}

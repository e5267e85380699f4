package api

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/raftfsm"
)

// A leader refuses a write that applying would take its disk under the
// threshold while the disk is still above it. The 507 said "the leader's
// disk is below its minimum free space (--min-free-disk)", which df
// contradicted; and under the 96 MiB floor with a smaller --min-free-disk
// (64 MiB, 90 MB free) it named only the flag.
func TestStorageFullSaysWhichThreshold(t *testing.T) {
	p := storeProblem(fmt.Errorf("%w: 5 bytes free", raftfsm.ErrStorageNearlyFull))
	require.Equal(t, http.StatusInsufficientStorage, p.Status)
	require.Equal(t, codeStorageFull, p.Code)
	require.Contains(t, p.Detail, "nearly full: applying this write with those in flight")
	require.NotContains(t, p.Detail, "is below its minimum free space")
	require.Equal(t, 30, p.retryAfter)

	p = storeProblem(fmt.Errorf("%w: 5 bytes free", raftfsm.ErrStorageFull))
	require.Contains(t, p.Detail, "is below its minimum free space (--min-free-disk, or 96 MiB if that is more")
}

// A client write the leader proposed and did not see committed within
// its bound (its followers' disks full, not yet read) is an unknown
// outcome, retried in a second; it is not said that leadership changed.
func TestCommitWaitIsAnUnknownOutcome(t *testing.T) {
	p := storeProblem(&raftfsm.CommitWaitError{Waited: 5 * time.Second})
	require.Equal(t, http.StatusServiceUnavailable, p.Status)
	require.Equal(t, codeUnavailable, p.Code)
	require.Equal(t, 1, p.retryAfter)
	require.Contains(t, p.Detail, "did not commit it within 5s")
	require.Contains(t, p.Detail, "its outcome is unknown, retry it (a claim with the same claim_id returns the same claim)")
	require.NotContains(t, p.Detail, "leadership changed")
}

// A leader whose data dir's disk is too small for it ever to take writes
// does not tell the client that writes come back once space is freed.
func TestStorageFullOnADiskTooSmallSaysFreeingCannotHelp(t *testing.T) {
	p := storeProblem(fmt.Errorf("%w: 5 bytes free", raftfsm.ErrDiskTooSmall))
	require.Equal(t, http.StatusInsufficientStorage, p.Status)
	require.Equal(t, codeStorageFull, p.Code)
	require.Contains(t, p.Detail, "Freeing space cannot help: give the leader's data dir a larger disk")
	require.NotContains(t, p.Detail, "accepted again once space is freed")
}

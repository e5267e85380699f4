package api

import (
	"fmt"
	"net/http"
	"testing"

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

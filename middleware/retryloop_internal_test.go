package middleware

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/client"
)

// retry (a store call within StoreTimeout) and retryBackoff (a complete
// asked again in the background) are one loop: the first tries at once
// and pauses from retryFloor, the second pauses first, from backoffFloor;
// both stop at the store's refusal below 500, and at ctx's end return the
// last error, or ctx's when nothing was tried.
func TestRetryTriesAtOnceAndRetryBackoffPausesFirst(t *testing.T) {
	refused := &client.Problem{Status: http.StatusConflict, Code: client.CodeInProgress}
	tries := func(errs ...error) (func() error, *[]time.Time) {
		var at []time.Time
		return func() error {
			at = append(at, time.Now())
			if len(at) <= len(errs) {
				return errs[len(at)-1]
			}
			return nil
		}, &at
	}

	start := time.Now()
	f, at := tries(unavailable("no leader"), unavailable("no leader"))
	require.NoError(t, retry(context.Background(), f))
	require.Len(t, *at, 3)
	require.Less(t, (*at)[0].Sub(start), 20*time.Millisecond, "the foreground's first try is at once")
	require.GreaterOrEqual(t, (*at)[1].Sub((*at)[0]), retryFloor/2)
	require.Less(t, (*at)[1].Sub((*at)[0]), 2*retryFloor+100*time.Millisecond)

	f, at = tries(refused)
	require.ErrorIs(t, retry(context.Background(), f), refused)
	require.Len(t, *at, 1, "a refusal is not asked again")

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	last := unavailable("still no leader")
	f, _ = tries(unavailable("no leader"), unavailable("no leader"), unavailable("no leader"), unavailable("no leader"), last, last, last, last)
	err := retry(ctx, f)
	require.ErrorIs(t, err, last, "the last error at ctx's end, not ctx's")

	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	f, at = tries()
	require.ErrorIs(t, retryBackoff(ctx, f), context.DeadlineExceeded)
	require.Empty(t, *at, "the background pauses first: backoffFloor/2 at least")

	start = time.Now()
	f, at = tries(refused)
	require.ErrorIs(t, retryBackoff(context.Background(), f), refused)
	require.Len(t, *at, 1, "a refusal is not asked again")
	require.GreaterOrEqual(t, (*at)[0].Sub(start), backoffFloor/2, "the background's first pause")
}

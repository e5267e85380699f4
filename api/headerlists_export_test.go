package api

import "time"

// SetListsGateRetry lets the external tests see a member's upgrade within
// a test's time; it returns the previous value.
func SetListsGateRetry(d time.Duration) time.Duration {
	old := listsGateRetry
	listsGateRetry = d
	return old
}

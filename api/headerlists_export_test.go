package api

import "time"

// SetListsGateRetry lets the external tests see a member's upgrade within
// a test's time; it returns the previous value.
func SetListsGateRetry(d time.Duration) time.Duration {
	old := listsGateRetry
	listsGateRetry = d
	return old
}

// SetListsGateRecheck sets how soon a gate that was open asks the members
// again; it returns the previous value.
func SetListsGateRecheck(d time.Duration) time.Duration {
	old := listsGateRecheck
	listsGateRecheck = d
	return old
}

// SetFeatureWatch sets when WatchFeatures first asks, for how long it asks
// again at that pace until every member answered, and how often after; it
// returns the previous values.
func SetFeatureWatch(first, settle, every time.Duration) (time.Duration, time.Duration, time.Duration) {
	f, st, e := featureWatchFirst, featureWatchSettle, featureWatchEvery
	featureWatchFirst, featureWatchSettle, featureWatchEvery = first, settle, every
	return f, st, e
}

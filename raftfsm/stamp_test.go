package raftfsm

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// /v1/cluster's times are written as every time of the API: RFC 3339 UTC
// with milliseconds, also at a whole second (a time.Time writes
// nanoseconds, and no fraction at all at a whole second); a member's
// status from a release that wrote them the old way still reads.
func TestClusterTimesAreMillisecondsUTC(t *testing.T) {
	var m Member
	m.ID = "n1"
	m.CheckedAt = stamp(time.Date(2026, 12, 4, 14, 42, 54, 565408147, time.FixedZone("x", 3600)))
	m.CertNotAfter = stamp(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC))
	b, err := json.Marshal(m)
	require.NoError(t, err)
	require.Contains(t, string(b), `"checked_at":"2026-12-04T13:42:54.565Z"`)
	require.Contains(t, string(b), `"cert_not_after":"2027-01-01T00:00:00.000Z"`)
	require.NotContains(t, string(b), `"ca_not_after"`) // absent without TLS, as before

	var back Member
	require.NoError(t, json.Unmarshal(b, &back))
	require.True(t, back.CheckedAt.Equal(time.Date(2026, 12, 4, 13, 42, 54, 565000000, time.UTC)))
	old := []byte(`{"id":"n1","checked_at":"2026-12-04T14:42:54.565408147Z","cert_not_after":"2027-01-01T00:00:00Z","ca_not_after":null}`)
	require.NoError(t, json.Unmarshal(old, &back))
	require.Equal(t, 565408147, back.CheckedAt.Nanosecond())
	require.True(t, back.CertNotAfter.Equal(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)))
	require.Nil(t, back.CANotAfter)
}

package api

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idem-store/idem/wire"
)

// writeClaimedJSON writes what writeJSON writes for any claim answer it
// takes, and writes nothing when it declines.
func FuzzWriteClaimedJSON(f *testing.F) {
	f.Add("claimed", "00000000000000000009.74e0aa", 1, int64(1764563400123), int64(1764649800123), int64(1764563430123), int32(456789), 0, false)
	f.Add("replay", "a<b", -3, int64(-62167219200000), int64(253402300799999), int64(0), int32(999999), 3600, true)
	f.Add("claimed", "1", 7, int64(-62167219200001), int64(253402300800000), int64(1), int32(0), -1, false)
	f.Fuzz(func(t *testing.T, outcome, token string, attempt int, created, expires, lease int64, nanos int32, zone int, record bool) {
		loc := time.UTC
		if zone != 0 {
			loc = time.FixedZone("z", zone%(26*3600))
		}
		at := func(ms int64) time.Time {
			if ms == 0 {
				return time.Time{}
			}
			return time.UnixMilli(ms).Add(time.Duration(nanos % 1_000_000)).In(loc)
		}
		c := wire.ClaimResponse{Outcome: outcome, Token: token, Attempt: attempt,
			CreatedAt: at(created), ExpiresAt: at(expires), LeaseExpiresAt: at(lease)}
		if record {
			c.Record = &wire.Record{}
		}
		got := httptest.NewRecorder()
		if !writeClaimedJSON(got, &c) {
			if got.Body.Len() != 0 || len(got.Header()) != 0 || got.Code != 200 {
				t.Fatalf("declined but wrote %d %q", got.Code, got.Body.String())
			}
			return
		}
		want := httptest.NewRecorder()
		writeJSON(want, 201, c)
		if got.Code != want.Code || got.Body.String() != want.Body.String() || got.Header().Get("Content-Type") != want.Header().Get("Content-Type") {
			t.Fatalf("fast %d %q\nslow %d %q", got.Code, got.Body.String(), want.Code, want.Body.String())
		}
	})
}

package client

import (
	"encoding/json"
	"reflect"
	"testing"
)

var claimedAnswers = []string{
	// what a server writes (taken by the fast path)
	`{"outcome":"claimed","token":"00000000000000000009.74e0aa31b2c4d5e6","attempt":1,"created_at":"2026-12-01T04:30:00.123Z","expires_at":"2026-12-02T04:30:00.123Z","lease_expires_at":"2026-12-01T04:30:30.123Z"}` + "\n",
	`{"outcome":"claimed","token":"12","attempt":27,"created_at":"2026-12-01T04:30:00.000Z","expires_at":"2026-12-01T04:30:00.000Z","lease_expires_at":"2026-12-01T04:30:00.000Z"}`,
	// anything else (json.Unmarshal decodes it or refuses it)
	`{"outcome":"replay","record":{"state":"completed"}}`,
	`{"token":"1","outcome":"claimed","attempt":1,"created_at":"2026-12-01T04:30:00.000Z","expires_at":"2026-12-01T04:30:00.000Z","lease_expires_at":"2026-12-01T04:30:00.000Z"}`,
	`{"outcome":"claimed","token":"a\"b","attempt":1,"created_at":"2026-12-01T04:30:00.000Z","expires_at":"2026-12-01T04:30:00.000Z","lease_expires_at":"2026-12-01T04:30:00.000Z"}`,
	`{"outcome":"claimed","token":"1","attempt":01,"created_at":"2026-12-01T04:30:00.000Z","expires_at":"2026-12-01T04:30:00.000Z","lease_expires_at":"2026-12-01T04:30:00.000Z"}`,
	`{"outcome":"claimed","token":"1","attempt":1,"created_at":"2026-13-01T04:30:00.000Z","expires_at":"2026-12-01T04:30:00.000Z","lease_expires_at":"2026-12-01T04:30:00.000Z"}`,
	`{"outcome":"claimed","token":"1","attempt":1,"created_at":"2026-12-01T04:30:00.000+01:00","expires_at":"2026-12-01T04:30:00.000Z","lease_expires_at":"2026-12-01T04:30:00.000Z"}`,
	`{"outcome":"claimed","token":"1","attempt":1,"created_at":"2026-12-01T04:30:00.000Z","expires_at":"2026-12-01T04:30:00.000Z","lease_expires_at":"2026-12-01T04:30:00.000Z","extra":1}`,
	`{"outcome":"claimed","token":"1","attempt":1,"created_at":"2026-12-01T04:30:00.000Z","expires_at":"2026-12-01T04:30:00.000Z"}`,
	`{"outcome":"claimed","token":"1","attempt":-1,"created_at":"2026-12-01T04:30:00.000Z","expires_at":"2026-12-01T04:30:00.000Z","lease_expires_at":"2026-12-01T04:30:00.000Z"}`,
	`{"outcome":"claimed","token":"1","attempt":+1,"created_at":"2026-12-01T04:30:00.000Z","expires_at":"2026-12-01T04:30:00.000Z","lease_expires_at":"2026-12-01T04:30:00.000Z"}`,
	`{"outcome":"claimed"`,
	``,
}

// fastClaimed takes what a server writes, and whatever it takes
// json.Unmarshal decodes to the same value.
func TestFastClaimedAgreesWithUnmarshal(t *testing.T) {
	for i, raw := range claimedAnswers {
		checkFastClaimed(t, []byte(raw), i < 2)
	}
}

func checkFastClaimed(t *testing.T, raw []byte, wantFast bool) {
	t.Helper()
	var fast ClaimResponse
	took := fastClaimed(raw, &fast)
	if wantFast && !took {
		t.Errorf("fastClaimed left %s to json.Unmarshal", raw)
	}
	if !took {
		return
	}
	var slow ClaimResponse
	if err := json.Unmarshal(raw, &slow); err != nil {
		t.Errorf("fastClaimed took %s, which json.Unmarshal refuses: %v", raw, err)
		return
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Errorf("%s:\nfast %+v\nslow %+v", raw, fast, slow)
	}
}

func FuzzFastClaimed(f *testing.F) {
	for _, a := range claimedAnswers {
		f.Add([]byte(a))
	}
	f.Fuzz(func(t *testing.T, raw []byte) { checkFastClaimed(t, raw, false) })
}

package client

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/idem-store/idem/wire"
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

var batchAnswers = []string{
	// what a server writes (taken by the fast path)
	`{"results":[{"status":201,"body":{"outcome":"claimed","token":"1","attempt":1}` + "\n" + `},{"status":409,"body":{"code":"in_progress","detail":"a \"quoted\" ,}] detail"}` + "\n" + `,"retry_after":1}]}` + "\n",
	`{"results":[{"status":200,"body":{"record":{"response":{"body":"[{,}]","headers":{"a":["b"]}}}}}]}`,
	`{"results":[{"status":503,"body":null,"retry_after":30},{"status":200,"body":"x\\"},{"status":200,"body":[1,{"a":[]}]}]}`,
	// anything else (json.Unmarshal decodes it or refuses it)
	`{"results":[]}`, `{"results":null}`, `{"results":[{"status":201,"body":1,"extra":2}]}`,
	`{"results":[{"status":201, "body":1}]}`, `{"results":[{"status":201,"body": 1}]}`, `{"results":[{"body":1,"status":201}]}`,
	`{"results":[{"status":0201,"body":1}]}`, `{"results":[{"status":-1,"body":1}]}`, `{"results":[{"status":2.5,"body":1}]}`,
	`{"results":[{"status":201,"body":1,"retry_after":1,"retry_after":2}]}`, `{"results":[{"status":201,"body":{"a":1]}]}`,
	`{"results":[{"status":201,"body":1}],"results":[{"status":200,"body":2}]}`, `{"results":[{"status":201,"body":1}]} x`,
	`{"results":[{"status":201,"body":1}]`, `{"results":[{"status":201,"body":"` + "\xff" + `"}]}`, ``,
}

// fastBatchResults takes what a server writes, and whatever it takes
// json.Unmarshal decodes to the same results.
func TestFastBatchResultsAgreesWithUnmarshal(t *testing.T) {
	for i, raw := range batchAnswers {
		checkFastBatchResults(t, []byte(raw), i < 3)
	}
}

func checkFastBatchResults(t *testing.T, raw []byte, wantFast bool) {
	t.Helper()
	fast, took := fastBatchResults(raw)
	if wantFast && !took {
		t.Errorf("fastBatchResults left %s to json.Unmarshal", raw)
	}
	if !took {
		return
	}
	var slow wire.BatchResponse
	if err := json.Unmarshal(raw, &slow); err != nil {
		t.Errorf("fastBatchResults took %s, which json.Unmarshal refuses: %v", raw, err)
		return
	}
	if len(fast) != len(slow.Results) {
		t.Fatalf("%s: %d results fast, %d slow", raw, len(fast), len(slow.Results))
	}
	for i := range fast {
		f, s := fast[i], slow.Results[i]
		if f.Status != s.Status || f.RetryAfter != s.RetryAfter || string(f.Body) != string(s.Body) {
			t.Errorf("%s: result %d\nfast %d %q %d\nslow %d %q %d", raw, i, f.Status, f.Body, f.RetryAfter, s.Status, s.Body, s.RetryAfter)
		}
	}
}

func FuzzFastBatchResults(f *testing.F) {
	for _, a := range batchAnswers {
		f.Add([]byte(a))
	}
	f.Fuzz(func(t *testing.T, raw []byte) { checkFastBatchResults(t, raw, false) })
}

// parseStamp reads what time.Parse(time.RFC3339) reads, to the same value,
// and refuses what it refuses.
func TestParseStampAgreesWithTimeParse(t *testing.T) {
	for _, in := range []string{"2026-12-01T04:30:00.123Z", "0000-01-01T00:00:00.000Z", "9999-12-31T23:59:59.999Z",
		"2024-02-29T12:00:00.000Z", "2026-02-29T12:00:00.000Z", "2026-04-31T00:00:00.000Z", "2026-00-10T00:00:00.000Z",
		"2026-12-01T24:00:00.000Z", "2026-12-01T23:60:00.000Z", "2026-12-01T23:59:60.000Z", "2026-12-01T04:30:00.1a3Z",
		"2026-12-01T04:30:00.123+01:00", "2026-12-01T04:30:00Z", "2026-12-01 04:30:00.123Z", "-026-12-01T04:30:00.123Z",
		"2026-12-01T04:30:00.123z", "", "2026-12-01T04:30:00.1234Z"} {
		got, ok := parseStamp([]byte(in))
		want, err := time.Parse(time.RFC3339, in)
		if ok != (err == nil) || got != want {
			t.Errorf("%q: parseStamp %v %v, time.Parse %v %v", in, got, ok, want, err)
		}
	}
}

func FuzzParseStamp(f *testing.F) {
	f.Add("2026-12-01T04:30:00.123Z")
	f.Fuzz(func(t *testing.T, in string) {
		got, ok := parseStamp([]byte(in))
		want, err := time.Parse(time.RFC3339, in)
		if ok != (err == nil) || got != want {
			t.Errorf("%q: parseStamp %v %v, time.Parse %v %v", in, got, ok, want, err)
		}
	})
}

package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/wire"
)

// claimBodies are claim bodies the fast path must take, and bodies it
// must leave to decodeStrict (which accepts some and refuses the others).
var claimBodies = []string{
	// taken
	`{"principal":"cus_42","endpoint":"POST /payments","key":"k-1","fingerprint":"9f86d081884c7d65"}`,
	`{"principal":"cus_42","endpoint":"POST /payments","key":"k-1","fingerprint":"9f86d081","claim_id":"c1","correlation_id":"r1","lease_ms":30000}`,
	" \n{ \"key\" : \"k\" , \"principal\":\"p\",\"endpoint\":\"e\",\"fingerprint\":\"ab\",\"lease_ms\":-5 }\t",
	`{"principal":"ｃｕｓ","endpoint":"POST /€","key":"ключ","fingerprint":"ab"}`,
	`{}`,
	`{"lease_ms":0}`,
	// left to decodeStrict
	`{"principal":"cus\u0034","endpoint":"e","key":"k","fingerprint":"ab"}`,
	`{"principal":"a\"b","endpoint":"e","key":"k","fingerprint":"ab"}`,
	`{"Principal":"p","endpoint":"e","key":"k","fingerprint":"ab"}`,
	`{"principal":"p","principal":"q","endpoint":"e","key":"k","fingerprint":"ab"}`,
	`{"principal":"p","endpoint":"e","key":"k","fingerprint":"ab","extra":1}`,
	`{"principal":null,"endpoint":"e","key":"k","fingerprint":"ab"}`,
	`{"principal":"p","endpoint":"e","key":"k","fingerprint":"ab","lease_ms":null}`,
	`{"principal":"p","endpoint":"e","key":"k","fingerprint":"ab","lease_ms":1.5}`,
	`{"principal":"p","endpoint":"e","key":"k","fingerprint":"ab","lease_ms":1e3}`,
	`{"principal":"p","endpoint":"e","key":"k","fingerprint":"ab","lease_ms":01}`,
	`{"principal":"p","endpoint":"e","key":"k","fingerprint":"ab","lease_ms":"5"}`,
	`{"principal":"p","endpoint":"e","key":"k","fingerprint":"ab","lease_ms":99999999999999999999}`,
	`{"principal":"p","endpoint":"e","key":"k","fingerprint":"ab"} {}`,
	`{"principal":"p","endpoint":"e","key":"k","fingerprint":"ab",}`,
	`{"principal":"p" "endpoint":"e"}`,
	`{"principal":"p\xff","endpoint":"e","key":"k","fingerprint":"ab"}`,
	"{\"principal\":\"p\tq\",\"endpoint\":\"e\",\"key\":\"k\",\"fingerprint\":\"ab\"}",
	`{"principal":123,"endpoint":"e","key":"k","fingerprint":"ab"}`,
	`[]`,
	`"x"`,
	``,
	`{`,
	`{"principal":"p"`,
	`{"principal":"p`,
	`{"lease_ms":-}`,
	`{"lease_ms":-0}`,
}

// fastClaim takes what it should, and whatever it takes decodeStrict
// takes too, with the same result.
func TestFastClaimAgreesWithDecodeStrict(t *testing.T) {
	for i, body := range claimBodies {
		checkFastClaim(t, []byte(body), i < 6)
	}
	// What the Go client and idem bench send.
	c, err := json.Marshal(wire.ClaimRequest{Principal: "cus_1", Endpoint: "POST /payments", Key: "abc", Fingerprint: "9f86d081884c7d65", ClaimID: "x", LeaseMs: 1000})
	if err != nil {
		t.Fatal(err)
	}
	checkFastClaim(t, c, true)
}

func checkFastClaim(t *testing.T, body []byte, wantFast bool) {
	t.Helper()
	var fast claimRequest
	took := fastClaim(body, &fast)
	if wantFast && !took {
		t.Errorf("fastClaim left %s to the slow path", body)
	}
	var slow claimRequest
	p := decodeStrict(body, &slow)
	if took && p != nil {
		t.Errorf("fastClaim took %s, which decodeStrict refuses: %s", body, p.Detail)
	}
	if took && !reflect.DeepEqual(fast, slow) {
		t.Errorf("%s: fastClaim %+v, decodeStrict %+v", body, fast, slow)
	}
}

func FuzzFastClaim(f *testing.F) {
	for _, b := range claimBodies {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkFastClaim(t, body, false) })
}

// writeClaimedJSON writes the bytes writeJSON writes, and takes the usual
// answer.
func TestWriteClaimedJSONAgreesWithWriteJSON(t *testing.T) {
	at := time.Date(2026, 12, 1, 4, 30, 0, 123_000_000, time.UTC)
	cases := []struct {
		c    wire.ClaimResponse
		fast bool
	}{
		{wire.ClaimResponse{Outcome: wire.OutcomeClaimed, Token: "00000000000000000009.74e0aa", Attempt: 1, CreatedAt: at, ExpiresAt: at.Add(24 * time.Hour), LeaseExpiresAt: at.Add(30 * time.Second)}, true},
		{wire.ClaimResponse{Outcome: wire.OutcomeClaimed, Token: "12", Attempt: 3, CreatedAt: at.In(time.FixedZone("x", 3600)), ExpiresAt: at, LeaseExpiresAt: at}, true},
		{wire.ClaimResponse{Outcome: wire.OutcomeClaimed, Token: "a<b", Attempt: 1, CreatedAt: at, ExpiresAt: at, LeaseExpiresAt: at}, false},
		{wire.ClaimResponse{Outcome: wire.OutcomeClaimed, Token: "1", Attempt: 1, CreatedAt: at, ExpiresAt: at}, false},
		{wire.ClaimResponse{Outcome: wire.OutcomeReplay, Record: &wire.Record{}}, false},
	}
	for _, tc := range cases {
		want := httptest.NewRecorder()
		writeJSON(want, 201, tc.c)
		got := httptest.NewRecorder()
		took := writeClaimedJSON(got, &tc.c)
		if took != tc.fast {
			t.Errorf("%+v: took %v, want %v", tc.c, took, tc.fast)
		}
		if !took {
			if got.Body.Len() != 0 || len(got.Header()) != 0 {
				t.Errorf("declined but wrote %q", got.Body.String())
			}
			continue
		}
		if got.Code != want.Code || got.Body.String() != want.Body.String() || got.Header().Get("Content-Type") != want.Header().Get("Content-Type") {
			t.Errorf("fast %d %q %q\nslow %d %q %q", got.Code, got.Header().Get("Content-Type"), got.Body.String(),
				want.Code, want.Header().Get("Content-Type"), want.Body.String())
		}
	}
}

// appendTime writes what AppendFormat of the wire layout writes, over the
// whole range of years it handles, and the edges either side of it.
func TestAppendTimeAgreesWithAppendFormat(t *testing.T) {
	times := []time.Time{
		time.Unix(0, 0), time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 12, 31, 23, 59, 59, 999_000_000, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2024, 2, 29, 12, 0, 0, 1_000_000, time.FixedZone("east", 13*3600)), time.Date(2026, 12, 1, 4, 30, 0, 123_456_789, time.Local),
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		times = append(times, time.UnixMilli(r.Int64N(400_000_000_000_000)-62_167_219_200_000))
	}
	for _, at := range times {
		want := string(at.UTC().AppendFormat([]byte("x"), wire.TimeLayout))
		if got := string(appendTime([]byte("x"), at)); got != want {
			t.Fatalf("%v: appendTime %q, AppendFormat %q", at, got, want)
		}
	}
}

// FormatToken keeps the form fmt.Sprintf("%020d.%x") gave it, which
// tokens already issued have, and splitToken reads it back.
func TestFormatTokenForm(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	s := engine.Scope{Principal: "p", Endpoint: "POST /x", Key: "k"}
	for _, index := range []uint64{1, 9, 10, 1234567890, 1<<63 + 5, ^uint64(0)} {
		got := FormatToken(key, false, s, index)
		want := fmt.Sprintf("%020d.%x", index, tokenMAC(key, false, s, index))
		if got != want {
			t.Fatalf("index %d: %q, want %q", index, got, want)
		}
		if i, mac, ok := splitToken(got); !ok || i != index || string(mac) != string(tokenMAC(key, false, s, index)) {
			t.Fatalf("splitToken(%q) = %d, %x, %v", got, i, mac, ok)
		}
	}
	// The pooled MAC is the MAC of domain, scope and index under the key
	// it is asked for, keys interleaved (a pooled state of another key is
	// not reused).
	other := []byte("another secret key, 32 bytes....")
	for i := range uint64(50) {
		k, principalOnly := key, i%3 == 0
		if i%2 == 1 {
			k = other
		}
		m := hmac.New(sha256.New, k)
		m.Write(tokenDomain)
		m.Write(engine.AppendScope(nil, s, principalOnly))
		m.Write(binary.BigEndian.AppendUint64(nil, i))
		if want, got := m.Sum(nil)[:tokenMACBytes], tokenMAC(k, principalOnly, s, i); !hmac.Equal(got, want) {
			t.Fatalf("index %d: tokenMAC %x, want %x", i, got, want)
		}
	}
}

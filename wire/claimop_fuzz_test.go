package wire

import "testing"

// The hand-written claim op is byte for byte what encoding/json writes
// for any strings and lease, or it declines (and MarshalJSON then takes
// encoding/json).
func FuzzClaimOpFastPath(f *testing.F) {
	f.Add("cus_42", "POST /payments", "k-1", "9f86d081", int64(30000), "c1", "r1")
	f.Add("<&>", "a\"b", "k\\", "\x00", int64(-5), "", "\u2028")
	f.Add("é", "\xff", "~", "", int64(0), "\x7f", "x")
	f.Fuzz(func(t *testing.T, p, e, k, fp string, lease int64, claimID, corr string) {
		c := &ClaimRequest{Principal: p, Endpoint: e, Key: k, Fingerprint: fp, LeaseMs: lease, ClaimID: claimID, CorrelationID: corr}
		op := BatchOp{Op: OpClaim, Body: c}
		want, err := op.marshalReflect()
		if err != nil {
			t.Fatal(err)
		}
		got, ok := appendClaimOp(nil, c)
		if !ok {
			return
		}
		if string(got) != string(want) {
			t.Fatalf("%+v:\n got  %s\n want %s", c, got, want)
		}
	})
}

package editdist

import "testing"

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b  string
		limit int
		want  int
	}{
		{"", "", -1, 0},
		{"lease", "lease_ms", -1, 3},
		{"lease", "lease_ms", 2, 3}, // lengths 3 apart: not compared
		{"retenton", "retention", 2, 1},
		{"kitten", "sitting", -1, 3},
		{"kitten", "sitting", 2, 3}, // over the limit: limit+1
		{"IDEM_ADRR", "IDEM_ADDR", 2, 1},
		{"abc", "abc", 0, 0},
	} {
		if got := Distance(tc.a, tc.b, tc.limit); got != tc.want {
			t.Errorf("Distance(%q, %q, %d) = %d, want %d", tc.a, tc.b, tc.limit, got, tc.want)
		}
	}
}

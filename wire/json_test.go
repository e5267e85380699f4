package wire

import "testing"

// ValueEnd stops at the delimiter after a value at its own depth, past
// strings holding delimiters and escaped quotes.
func TestValueEnd(t *testing.T) {
	for in, want := range map[string]int{
		`1,2`: 1, `1 ]`: 2, `"a,\"]}" , x`: 9, `{"a":[1,{"b":"}"}]}]`: 19, `[1,2]}`: 5,
		`null`: 0, `"open`: 0, `{"a":1`: 0,
	} {
		if got := ValueEnd([]byte(in)); got != want {
			t.Errorf("ValueEnd(%q) = %d, want %d", in, got, want)
		}
	}
}

package redact

import "testing"

func TestAddressesLoseTheirPassword(t *testing.T) {
	for _, tc := range []struct{ in, addr, broken string }{
		{"127.0.0.1:7070", "127.0.0.1:7070", "127.0.0.1:7070"},
		{"http://u:pw@h:1", "http://u:xxxxx@h:1", "http://u:xxxxx@h:1"},
		{"u@h:1", "u@h:1", "xxxxx@h:1"},
		// A password holding '/': Addr stops at it, BrokenAddr does not.
		{"http://u:p/w@h:1", "http://u:p/w@h:1", "http://u:xxxxx@h:1"},
		{"http://u:2024#pw@h:1/x@y", "http://u:2024#pw@h:1/x@y", "http://u:xxxxx@y"},
	} {
		if got := Addr(tc.in); got != tc.addr {
			t.Errorf("Addr(%q) = %q, want %q", tc.in, got, tc.addr)
		}
		if got := BrokenAddr(tc.in); got != tc.broken {
			t.Errorf("BrokenAddr(%q) = %q, want %q", tc.in, got, tc.broken)
		}
	}
}

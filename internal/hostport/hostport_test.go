package hostport

import "testing"

func TestKey(t *testing.T) {
	same := [][3]string{ // a, b, scheme of both
		{"127.0.0.1:7070", "127.0.0.1:7070", "http"},
		{"[::1]:7070", "[0:0:0:0:0:0:0:1]:7070", "http"},
		{"[::1]:7070", "[::0001]:7070", "https"},
		{"[2001:DB8::2]:7070", "[2001:db8::2]:7070", "http"},
		{"[::ffff:10.0.0.1]:7070", "10.0.0.1:7070", "http"},
		{"Node-1.Example:7070", "node-1.example:7070", "http"},
		{"node:80", "node", "http"},
		{"[::1]:443", "[::1]", "https"},
		{"node:07070", "node:7070", "http"},
	}
	for _, c := range same {
		if a, b := Key(c[0], c[2]), Key(c[1], c[2]); a == "" || a != b {
			t.Errorf("Key(%q) = %q, Key(%q) = %q: want one non-empty key", c[0], a, c[1], b)
		}
	}
	differ := [][3]string{
		{"127.0.0.1:7070", "127.0.0.2:7070", "http"},
		{"127.0.0.1:7070", "127.0.0.1:7071", "http"},
		{"node:443", "node", "http"},
		{"node.:7070", "node:7070", "http"}, // a resolver may read them apart
		{"localhost:7070", "127.0.0.1:7070", "http"},
		{"[fe80::1%eth0]:7070", "[fe80::1%eth1]:7070", "http"},
	}
	for _, c := range differ {
		if a, b := Key(c[0], c[2]), Key(c[1], c[2]); a == b {
			t.Errorf("Key(%q) = Key(%q) = %q: want them apart", c[0], c[1], a)
		}
	}
	for _, bad := range []string{"", "::1:7070", "node:0", "node:99999", "node:x", "http://node:7070"} {
		if k := Key(bad, "http"); k != "" {
			t.Errorf("Key(%q) = %q, want \"\"", bad, k)
		}
	}
}

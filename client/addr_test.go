package client

import (
	"errors"
	"strings"
	"testing"
)

// New reads an address as the CLI's --addr does: without a scheme,
// host:port with a port from 1 to 65535, an IPv6 address in brackets (the
// hint of api.IPv6Hint when not). Before, New("[::1]") and New("localhost")
// dialled port 80, where no node listens, and a port of 0 or 99999 failed
// only at the dial, as a network error, where the CLI refused each.
func TestNewReadsAddressesAsTheCLI(t *testing.T) {
	for addr, hint := range map[string]string{
		"[::1]":                  "[::1]:7070",
		"::1":                    "[::1]:7070",
		"::1:7070":               "[::1]:7070",
		"localhost":              "no port",
		"10.0.0.1":               "no port",
		"127.0.0.1:0":            "1 to 65535",
		"127.0.0.1:99999":        "1 to 65535",
		"http://127.0.0.1:99999": "1 to 65535",
		"a:7070,[::1]":           "[::1]:7070",
	} {
		_, err := New(addr)
		if !errors.Is(err, ErrAddress) || !strings.Contains(err.Error(), hint) {
			t.Errorf("New(%q) = %v, want ErrAddress saying %q", addr, err, hint)
		}
	}
	for addr, want := range map[string]string{
		"[::1]:7070":              "http://[::1]:7070",
		"http://[::1]":            "http://[::1]",
		"https://idem.example":    "https://idem.example",
		":7070":                   "http://:7070",
		"[fe80::1%25eth0]:7070":   "http://[fe80::1%25eth0]:7070",
		"127.0.0.1:7070/prefix/":  "http://127.0.0.1:7070/prefix",
		"https://[2001:db8::1]:1": "https://[2001:db8::1]:1",
	} {
		c, err := New(addr)
		if err != nil || c.Addr() != want {
			t.Errorf("New(%q): %v, want %s", addr, err, want)
			continue
		}
	}
}

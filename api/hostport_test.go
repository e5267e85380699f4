package api_test

import (
	"strings"
	"testing"

	"github.com/idem-store/idem/api"
)

// An IPv6 address typed without brackets (--join ::1:7070, --addr
// 2001:db8::5:7070) or in brackets without a port ([::1]) was refused
// with Go's "too many colons in address" or "missing port", naming no
// form that works. The error now shows the one to type.
func TestCheckHostPortShowsTheIPv6Form(t *testing.T) {
	for v, want := range map[string]string{
		"::1:7070":         "[::1]:7070",
		"::1":              "[::1]:7070",
		"[::1]":            "[::1]:7070",
		"2001:db8::5:7070": "[2001:db8::5]:7070",
		"fe80::1%eth0:80":  "[fe80::1%eth0]:80",
	} {
		err := api.CheckHostPort(v)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckHostPort(%q) = %v, want it to show %s", v, err, want)
		}
	}
	for _, v := range []string{"[::1]:7070", "10.0.0.1:7070", "n1.example.com:7070", ":7070"} {
		if err := api.CheckHostPort(v); err != nil {
			t.Errorf("CheckHostPort(%q) = %v", v, err)
		}
	}
	for _, v := range []string{"10.0.0.1", "h:x", "n1.example.com"} {
		if err := api.CheckHostPort(v); err == nil || strings.Contains(err.Error(), "IPv6") || strings.Contains(err.Error(), "brackets") {
			t.Errorf("CheckHostPort(%q) = %v, want an error without an IPv6 hint", v, err)
		}
	}
}

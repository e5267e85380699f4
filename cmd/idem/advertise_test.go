package main

import (
	"os/exec"
	"strings"
	"testing"
)

// A cluster node on --http-addr 0.0.0.0:7070 with no --http-advertise was
// recorded at 0.0.0.0:7070, which members on other machines dial as
// themselves (forwards, health checks), without a word; raft's address
// has the same rule and is refused.
func TestHTTPAdvertiseNoteNamesAnUnspecifiedAddress(t *testing.T) {
	for _, tc := range []struct {
		c    serveConfig
		warn string
	}{
		{serveConfig{httpAddr: "0.0.0.0:7070", join: "10.0.0.1:7070"}, "--http-addr 0.0.0.0:7070"},
		{serveConfig{httpAddr: "[::]:7070", bootstrapExpect: 3, join: "a:1,b:1,c:1"}, "--http-addr [::]:7070"},
		{serveConfig{httpAddr: ":7070", join: "10.0.0.1:7070"}, "--http-addr :7070"},
		{serveConfig{httpAddr: "[::]:7070", httpAdvertise: "[::]:7070", join: "10.0.0.1:7070"}, "--http-advertise [::]:7070"},
		{serveConfig{httpAddr: "[::]:7070", httpAdvertise: "[2001:db8::4]:7070", join: "10.0.0.1:7070"}, ""},
		{serveConfig{httpAddr: "0.0.0.0:7070", httpAdvertise: "n4.example.com:7070", join: "10.0.0.1:7070"}, ""},
		{serveConfig{httpAddr: "0.0.0.0:7070"}, ""}, // one node: nobody dials it
		{serveConfig{httpAddr: "[::1]:7070", join: "[::1]:7080"}, ""},
	} {
		got := tc.c.httpAdvertiseNote()
		if tc.warn == "" && got != "" || tc.warn != "" && !strings.HasPrefix(got, tc.warn+" names every interface") {
			t.Errorf("%+v: note %q, want it to start %q", tc.c, got, tc.warn)
		}
	}
}

// idem proxy refused --listen ::1:8080 and --store ::1:7070 with "is not
// host:port" and url.Parse's "invalid port", naming no form that works.
func TestProxyAddressErrorsShowTheIPv6Form(t *testing.T) {
	out, err := exec.Command(binary, "proxy", "--listen", "::1:8080", "--upstream", "http://127.0.0.1:1", "--store", "::1:7070").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "[::1]:8080") || !strings.Contains(string(out), "[::1]:7070") {
		t.Errorf("idem proxy --listen ::1:8080 --store ::1:7070: %v\n%s\nwant [::1]:8080 and [::1]:7070 named", err, out)
	}
}

// idem tls cert --ip [::1] (or an address with its port, as --raft-advertise
// takes it) was "not an IP address", without the form --ip takes.
func TestTLSCertIPShowsTheBareAddress(t *testing.T) {
	for ip, want := range map[string]string{"[::1]": "--ip ::1)", "[2001:db8::1]:7071": "--ip 2001:db8::1)", "10.0.0.1:7071": "--ip 10.0.0.1)"} {
		out, err := exec.Command(binary, "tls", "cert", "--dir", t.TempDir(), "--name", "n1", "--ip", ip).CombinedOutput()
		if err == nil || !strings.Contains(string(out), want) {
			t.Errorf("idem tls cert --ip %s: %v\n%s\nwant %q", ip, err, out, want)
		}
	}
}

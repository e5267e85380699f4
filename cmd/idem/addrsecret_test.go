package main

import (
	"strings"
	"testing"
)

// An address refused for the user info it carries is named without its
// password: idem proxy writes its refusals to stderr, which a service
// manager keeps in the journal, and the CLI to terminals pasted into
// tickets (a leak walk: `--upstream "http://u:pass@…": a base URL takes no
// query, fragment or user info`, the password whole).
func TestRefusedAddressesHideTheirPassword(t *testing.T) {
	t.Setenv("IDEM_AUTH_TOKEN", "")
	const pw = "hunter2-secret"
	for _, tc := range []struct {
		name string
		run  func(t *testing.T) (int, string)
	}{
		{"proxy --upstream", func(t *testing.T) (int, string) {
			code, out, errOut := runClientCmd(t, runProxy, "--listen", freePort(t), "--upstream", "http://u:"+pw+"@127.0.0.9:1", "--store", freePort(t))
			return code, out + errOut
		}},
		{"proxy --upstream, not a URL", func(t *testing.T) (int, string) {
			code, out, errOut := runClientCmd(t, runProxy, "--listen", freePort(t), "--upstream", "http://u:"+pw+"@127.0.0.9:bad", "--store", freePort(t))
			return code, out + errOut
		}},
		{"proxy --store", func(t *testing.T) (int, string) {
			code, out, errOut := runClientCmd(t, runProxy, "--listen", freePort(t), "--upstream", "http://127.0.0.9:1", "--store", "http://u:"+pw+"@"+freePort(t))
			return code, out + errOut
		}},
		{"proxy --store, not a URL", func(t *testing.T) (int, string) {
			code, out, errOut := runClientCmd(t, runProxy, "--listen", freePort(t), "--upstream", "http://127.0.0.9:1", "--store", "http://u:"+pw+"@127.0.0.9:bad")
			return code, out + errOut
		}},
		{"cluster status --addr", func(t *testing.T) (int, string) {
			code, out, errOut := runClientCmd(t, runCluster, "status", "--addr", "http://u:"+pw+"@"+freePort(t))
			return code, out + errOut
		}},
		{"get --addr, a '/' in the password", func(t *testing.T) (int, string) {
			code, out, errOut := runClientCmd(t, runGet, "--addr", "http://u:"+pw+"/x@"+freePort(t), "--principal", "p", "--endpoint", "e", "--key", "k")
			return code, out + errOut
		}},
		{"cluster status --addr, a '?' in the password", func(t *testing.T) (int, string) {
			code, out, errOut := runClientCmd(t, runCluster, "status", "--addr", "u:"+pw+"?x@"+freePort(t))
			return code, out + errOut
		}},
		// A password of digits before its '/', '?' or '#' parses as a
		// port, the rest as a path, query or fragment.
		{"get --addr, digits then '/' in the password", func(t *testing.T) (int, string) {
			code, out, errOut := runClientCmd(t, runGet, "--addr", "http://u:2024/"+pw+"@"+freePort(t), "--principal", "p", "--endpoint", "e", "--key", "k")
			return code, out + errOut
		}},
		{"cluster status --addr, digits then '#' in the password", func(t *testing.T) (int, string) {
			code, out, errOut := runClientCmd(t, runCluster, "status", "--addr", "u:2024#"+pw+"@"+freePort(t))
			return code, out + errOut
		}},
		{"proxy --upstream, digits then '/' in the password", func(t *testing.T) (int, string) {
			code, out, errOut := runClientCmd(t, runProxy, "--listen", freePort(t), "--upstream", "http://u:2024/"+pw+"@127.0.0.9:1", "--store", freePort(t))
			return code, out + errOut
		}},
		{"proxy --store, digits then '?' in the password", func(t *testing.T) (int, string) {
			code, out, errOut := runClientCmd(t, runProxy, "--listen", freePort(t), "--upstream", "http://127.0.0.9:1", "--store", "http://u:2024?"+pw+"@"+freePort(t))
			return code, out + errOut
		}},
		// idem bench's own driver took user info as Basic auth and
		// printed the address, password and all, in its report.
		{"bench --addr", func(t *testing.T) (int, string) {
			code, out, errOut := runClientCmd(t, runBench, "--addr", "http://u:"+pw+"@"+freePort(t), "--duration", "1s", "--warmup", "0s", "--quiet")
			return code, out + errOut
		}},
		{"bench --addr, digits then '/' in the password", func(t *testing.T) (int, string) {
			code, out, errOut := runClientCmd(t, runBench, "--addr", "u:2024/"+pw+"@"+freePort(t), "--duration", "1s", "--warmup", "0s", "--quiet")
			return code, out + errOut
		}},
		{"get --addr", func(t *testing.T) (int, string) {
			code, out, errOut := runClientCmd(t, runGet, "--addr", "u:"+pw+"@"+freePort(t), "--principal", "p", "--endpoint", "e", "--key", "k")
			return code, out + errOut
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := tc.run(t)
			if code == 0 {
				t.Fatalf("an address with user info was accepted:\n%s", out)
			}
			if strings.Contains(out, pw) {
				t.Errorf("the refusal shows the password:\n%s", out)
			}
			if !strings.Contains(out, "user info") && !strings.Contains(out, "xxxxx@") {
				t.Errorf("the refusal does not say what is wrong:\n%s", out)
			}
		})
	}
}

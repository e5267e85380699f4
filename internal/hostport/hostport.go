// Package hostport compares node addresses as a dialer reads them: the
// Go client and idem proxy follow the leader an answer names (the
// Idem-Leader header, the host:port the leader advertises) only to one of
// the nodes they were given, and must find it there however either was
// spelled.
package hostport

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"unicode"
)

// Key is a canonical form of the host:port hp, for comparing addresses
// that a dialer reaches alike: a host name in lower case (DNS names are
// not case-sensitive); an IP in its one form (netip's: [0:0::1] and
// [::0001] are [::1], and an IPv4-mapped IPv6 address is the IPv4
// address); a port without leading zeros, and the scheme's default port
// (80 for http, 443 for https) when hp has none. Nothing is resolved: a
// name and an IP it resolves to are two keys, as is a name with and
// without a trailing dot (a resolver may read them differently). It is
// "" for what is not a host and port.
func Key(hp, scheme string) string {
	if hp == "" || strings.ContainsAny(hp, "/?#@ ") {
		return ""
	}
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		switch {
		case strings.HasPrefix(hp, "[") && strings.HasSuffix(hp, "]"):
			host = hp[1 : len(hp)-1]
		case strings.Contains(hp, ":"):
			return ""
		default:
			host = hp
		}
		switch scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		default:
			return ""
		}
	}
	if checkPort(port) != nil {
		return ""
	}
	n, _ := strconv.Atoi(port)
	if a, err := netip.ParseAddr(host); err == nil {
		host = a.Unmap().String()
	} else {
		host = strings.ToLower(host)
	}
	return net.JoinHostPort(host, strconv.Itoa(n))
}

// Check checks a host:port address with a port number from 1 to 65535,
// the rule of idem serve's address flags, the join API's member addresses
// and the Go client's address without a scheme. An empty host (":7070") is
// this machine to a dialer and every address to a listener.
func Check(v string) error {
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		if hint := IPv6Hint(v); hint != "" {
			return fmt.Errorf("%w: %s", err, hint)
		}
		return err
	}
	// No host name or IP holds a space: " 10.0.0.4" (a value pasted with
	// its indent) was taken, listened on as a name no resolver finds, or
	// recorded as a member's address that no member can dial.
	if strings.ContainsFunc(host, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return fmt.Errorf("host %q holds a space or control character", host)
	}
	return checkPort(port)
}

// checkPort checks a port number from 1 to 65535, in digits alone.
func checkPort(port string) error {
	if n, perr := strconv.Atoi(port); perr != nil || n < 1 || n > 65535 || strings.TrimLeft(port, "0123456789") != "" {
		return fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return nil
}

// CheckPort is checkPort for a URL's port (url.URL.Port): "" (none, the
// scheme's default) passes.
func CheckPort(port string) error {
	if port == "" {
		return nil
	}
	return checkPort(port)
}

// IPv6Hint says how to write v, an IPv6 address given without the
// brackets a host:port needs around it (::1:7070, or ::1 alone), or in
// brackets without a port ([::1]); "" for anything else.
func IPv6Hint(v string) string {
	is6 := func(h string) bool {
		a, err := netip.ParseAddr(h)
		return err == nil && a.Is6() && !a.Is4In6()
	}
	if strings.HasPrefix(v, "[") && strings.HasSuffix(v, "]") && is6(v[1:len(v)-1]) {
		return fmt.Sprintf("add the port after the brackets, e.g. %s:7070", v)
	}
	if i := strings.LastIndex(v, ":"); i > 0 && is6(v[:i]) && v[i+1:] != "" && strings.Trim(v[i+1:], "0123456789") == "" {
		if is6(v) {
			return fmt.Sprintf("an IPv6 address takes brackets: [%s]:%s (or, if %s is all address, [%s]:PORT)", v[:i], v[i+1:], v, v)
		}
		return fmt.Sprintf("an IPv6 address takes brackets: [%s]:%s", v[:i], v[i+1:])
	}
	if is6(v) {
		return fmt.Sprintf("an IPv6 address takes brackets and a port, e.g. [%s]:7070", v)
	}
	return ""
}

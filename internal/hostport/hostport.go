// Package hostport compares node addresses as a dialer reads them: the
// Go client and idem proxy follow the leader an answer names (the
// Idem-Leader header, the host:port the leader advertises) only to one of
// the nodes they were given, and must find it there however either was
// spelled.
package hostport

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
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
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || strings.Trim(port, "0123456789") != "" {
		return ""
	}
	if a, err := netip.ParseAddr(host); err == nil {
		host = a.Unmap().String()
	} else {
		host = strings.ToLower(host)
	}
	return net.JoinHostPort(host, strconv.Itoa(n))
}

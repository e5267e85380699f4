// Package redact hides the password of an address's user info in error
// messages: an address refused for the user info it carries must not print
// that password to a terminal or a log. The client and the CLI share it.
package redact

import "strings"

// Addr is addr with its user info's password replaced by "xxxxx".
func Addr(addr string) string { return userInfo(addr, false) }

// BrokenAddr is an address url.Parse refused (or read otherwise than it was
// meant), for an error message: what stands between "://" (or the start)
// and its last '@' is taken for user info, and a user alone is hidden too.
// Addr stops at the first '/', '?' or '#', where a password holding one
// (base64 has '/') would be printed whole.
func BrokenAddr(addr string) string { return userInfo(addr, true) }

func userInfo(addr string, broken bool) string {
	s := strings.TrimSpace(addr)
	rest, scheme := s, ""
	if i := strings.Index(s, "://"); i >= 0 {
		scheme, rest = s[:i+3], s[i+3:]
	}
	end := len(rest)
	if e := strings.IndexAny(rest, "/?#"); e >= 0 && !broken {
		end = e
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return addr
	}
	user := rest[:at]
	switch c := strings.IndexByte(user, ':'); {
	case c >= 0:
		user = user[:c] + ":xxxxx"
	case broken:
		user = "xxxxx"
	}
	return scheme + user + rest[at:]
}

package middleware

import (
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/idem-store/idem/client"
)

// folded is an answer whose headers sent more than once are stored as one
// string each (foldLists), and what that left out: the names of the
// headers left out (left), and of those kept with their first value
// alone (first).
type folded struct {
	resp        client.Response
	left, first []string
}

// foldLists is resp with each header sent more than once stored as one
// string, the form every version of the store reads. RFC 9110 (5.3) lets
// a recipient join the lines of a field into one, its values separated by
// ", ", only when the field is a list, and lets a sender send a field
// twice only then: such a header is joined. Two exceptions:
//
//   - Set-Cookie, whose values cannot be joined (RFC 9110 5.3, RFC 6265
//     3), is left out, and named in left.
//   - A field that takes one value (singleValued: Location, ETag,
//     Content-Disposition, ...) sent twice was sent against the RFC, and
//     joined it is no value of it at all ("/payments/1, /payments/2" is a
//     Location nobody sent). Its first value is kept, the one a reader of
//     the first answer took (Go's Header.Get, a Go client's
//     Response.Location; browsers refuse two Locations or two
//     Content-Dispositions that differ), and as the middleware stores two
//     Content-Types: the first. It is named in first.
func foldLists(resp client.Response) folded {
	f := folded{resp: resp}
	f.resp.Headers = maps.Clone(resp.Headers)
	f.resp.HeaderLists = nil
	for _, name := range slices.Sorted(maps.Keys(resp.HeaderLists)) {
		vs := resp.HeaderLists[name]
		switch ck := http.CanonicalHeaderKey(name); {
		case ck == "Set-Cookie":
			f.left = append(f.left, name)
		case singleValued[ck]:
			f.first = append(f.first, name)
			f.resp.SetHeader(name, vs[0])
		default:
			f.resp.SetHeader(name, strings.Join(vs, ", "))
		}
	}
	slices.Sort(f.left)
	return f
}

// singleValued are the response headers whose value is one item, not a
// list (RFC 9110 5.3: only a list may be sent as several lines and
// joined): those of RFC 9110 and 9111, and the common ones of other
// specifications (RFC 6266, RFC 6797, Fetch's CORS headers, HTML's
// policy headers). A header not named here, sent more than once, is taken
// for a list, as RFC 9110 says its sender meant.
var singleValued = map[string]bool{
	"Age": true, "Content-Disposition": true, "Content-Location": true, "Content-Range": true, "Content-Type": true,
	"Date": true, "Etag": true, "Expires": true, "Last-Modified": true, "Location": true, "Retry-After": true,
	"Server": true, "Strict-Transport-Security": true, "Refresh": true,
	"Access-Control-Allow-Origin": true, "Access-Control-Allow-Credentials": true, "Access-Control-Max-Age": true,
	"X-Content-Type-Options": true, "X-Frame-Options": true, "X-Xss-Protection": true,
	"Cross-Origin-Opener-Policy": true, "Cross-Origin-Embedder-Policy": true, "Cross-Origin-Resource-Policy": true,
	"Origin-Agent-Cluster": true,
}

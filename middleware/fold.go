package middleware

import (
	"cmp"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/idem-store/idem/client"
)

// folded is an answer whose headers sent more than once are stored as one
// string each (foldLists), and what that left out: the names of the
// headers left out (left), and of those kept with their first value
// alone (first). over reports that it is still larger than the limit it
// was folded within, with every joined header left out.
type folded struct {
	resp        client.Response
	left, first []string
	over        bool
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
//
// The store counts a header's name once per value of an array and once
// for a string, and its values with it: joined, ", " is counted for each
// value but the first, so an answer of a header with a short name (one
// byte) sent many times went over the store's --max-response-header-bytes
// (413), where the arrays had not, and was never stored: its key held
// until its lease ran out, and the retry ran the request again. The
// joined headers are left out, the largest first, until the answer is no
// larger than it was with arrays, which the store counted and took as
// far as their bytes go (it checks them before it refuses arrays): they
// are named in left too. A member whose limit is smaller than the one that
// counted the arrays (the members' flags differ: one restarted with a
// lower --max-response-header-bytes, and a client of several nodes sends
// the folded answer to it) refuses the fold 413 all the same: it is
// folded again within the limit that 413 names (foldListsWithin,
// storeFolded).
func foldLists(resp client.Response) folded { return foldListsWithin(resp, headerBytes(resp)) }

// foldListsWithin is foldLists with the joined headers left out, the
// largest first, until the answer's headers are at most limit bytes.
func foldListsWithin(resp client.Response, limit int) folded {
	f := folded{resp: resp}
	f.resp.Headers = maps.Clone(resp.Headers)
	f.resp.HeaderLists = nil
	var joined []string
	for _, name := range slices.Sorted(maps.Keys(resp.HeaderLists)) {
		vs := resp.HeaderLists[name]
		switch ck := http.CanonicalHeaderKey(name); {
		case ck == "Set-Cookie":
			f.left = append(f.left, name)
		case singleValued[ck]:
			f.first = append(f.first, name)
			f.resp.SetHeader(name, vs[0])
		default:
			joined = append(joined, name)
			f.resp.SetHeader(name, strings.Join(vs, ", "))
		}
	}
	// Largest first; names alike in size in their order (the bytes'), so
	// that the same answer always loses the same headers.
	slices.SortFunc(joined, func(a, b string) int {
		return cmp.Or(cmp.Compare(len(b)+len(f.resp.Headers[b]), len(a)+len(f.resp.Headers[a])), strings.Compare(a, b))
	})
	for ; headerBytes(f.resp) > limit && len(joined) > 0; joined = joined[1:] {
		f.resp.SetHeader(joined[0])
		f.left = append(f.left, joined[0])
	}
	f.over = headerBytes(f.resp) > limit
	slices.Sort(f.left)
	return f
}

// storeFolded stores resp folded (foldListsWithin) within *limit, the
// smallest header bytes a member is known to take: at first those of the
// arrays, which the member that refused them counted and took. A 413 to
// the fold (a member of a smaller limit) lowers *limit, to the limit it
// names (headersLimit) and below the fold it refused, and the answer is
// folded again and sent at once, until a fold is taken or refused
// otherwise. Left at the 413, the key was held until its lease ran out,
// and the retry ran the request again. A 413 for the body (the member's
// --max-response-bytes, or its --max-request-bytes for the whole complete)
// drops the body, as complete does; one to a fold
// that leaves out every joined header already, the headers: the answer
// is stored with its status alone, as complete stores an answer whose
// headers are too large.
func storeFolded(resp client.Response, limit *int, call func(client.Response) error) (folded, error) {
	omitted := 0 // the bytes of HeaderBodyOmitted, once the body is dropped
	for {
		f := foldListsWithin(resp, *limit-omitted)
		if omitted > 0 {
			f.resp.Body = nil
			f.resp.SetHeader(HeaderBodyOmitted, OmittedTooLarge)
		}
		err := call(f.resp)
		if !tooLarge(err) {
			return f, err
		}
		if bodyRefused(err) && len(f.resp.Body) > 0 {
			omitted = len(HeaderBodyOmitted) + len(OmittedTooLarge)
			continue
		}
		n := headerBytes(f.resp)
		*limit = min(*limit, n-1)
		if max, ok := headersLimit(err); ok {
			*limit = min(*limit, max)
		}
		if f.over {
			f = folded{resp: client.Response{Status: resp.Status, ContentType: resp.ContentType}}
			f.left = slices.Sorted(maps.Keys(resp.Headers))
			f.left = append(f.left, slices.Collect(maps.Keys(resp.HeaderLists))...)
			slices.Sort(f.left)
			f.resp.SetHeader(HeaderBodyOmitted, OmittedTooLarge)
			return f, call(f.resp)
		}
	}
}

// headersLimit reads the member's --max-response-header-bytes from its
// 413 to headers over it: "response.headers are N bytes together; at most
// M are stored" (api's words, pinned by its TestCompleteTooLargeStoresNothing).
func headersLimit(err error) (int, bool) {
	var p *client.Problem
	if !errors.As(err, &p) {
		return 0, false
	}
	rest, ok := strings.CutPrefix(p.Detail, "response.headers are ")
	if !ok {
		return 0, false
	}
	_, rest, ok = strings.Cut(rest, " bytes together; at most ")
	if !ok {
		return 0, false
	}
	num, _, ok := strings.Cut(rest, " are stored")
	n, err := strconv.Atoi(num)
	return n, ok && err == nil && n >= 0
}

// bodyRefused reports a member's 413 to a body over its
// --max-response-bytes: "response.body is N bytes decoded; at most M are
// stored" (api's words, pinned by its TestCompleteTooLargeStoresNothing),
// or to the whole complete, the body with it, over its --max-request-bytes
// or the raft entry's limit (request_too_large): that one names no header,
// and every joined header was taken out, one per try, and then the status
// alone stored, the replay's Location lost for a body the member would not
// take. complete drops the body first for either.
func bodyRefused(err error) bool {
	var p *client.Problem
	return errors.As(err, &p) && (strings.HasPrefix(p.Detail, "response.body is ") || errors.Is(err, client.ErrRequestTooLarge))
}

// headerBytes is the size of resp's headers as the store counts them
// against its --max-response-header-bytes: each name with each of its
// values.
func headerBytes(resp client.Response) int {
	n := 0
	for k, v := range resp.Headers {
		n += len(k) + len(v)
	}
	for k, vs := range resp.HeaderLists {
		for _, v := range vs {
			n += len(k) + len(v)
		}
	}
	return n
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

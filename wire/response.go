package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
)

// Response is an HTTP response stored by a complete and replayed verbatim.
// Body travels as standard base64.
//
// On the wire "headers" is one object whose values are a string, or an array
// of strings for a header sent more than once (two Set-Cookie), in the order
// sent. Each header keeps its form: a name given as a string is in Headers,
// a name given as an array (even of one value) is in HeaderLists, so a replay
// writes back exactly what was stored. A name is in one of the two, never
// both.
type Response struct {
	Status      int               `json:"status"`
	ContentType string            `json:"content_type"`
	Headers     map[string]string `json:"headers"`
	// HeaderLists are the headers stored as arrays; they travel inside
	// "headers" too.
	HeaderLists map[string][]string `json:"-"`
	Body        []byte              `json:"body"`
}

// Values returns the stored values of the header name (exact match), in
// order: one for a string, all for an array.
func (r *Response) Values(name string) []string {
	if v, ok := r.Headers[name]; ok {
		return []string{v}
	}
	return r.HeaderLists[name]
}

// HeaderCount is the number of stored header values, which the server's
// header limit counts.
func (r *Response) HeaderCount() int {
	n := len(r.Headers)
	for _, v := range r.HeaderLists {
		n += len(v)
	}
	return n
}

// SetHeader stores the values of one header: one value as a string, several
// as an array. It replaces what was stored under name.
func (r *Response) SetHeader(name string, values ...string) {
	delete(r.Headers, name)
	delete(r.HeaderLists, name)
	switch len(values) {
	case 0:
	case 1:
		if r.Headers == nil {
			r.Headers = map[string]string{}
		}
		r.Headers[name] = values[0]
	default:
		if r.HeaderLists == nil {
			r.HeaderLists = map[string][]string{}
		}
		r.HeaderLists[name] = slices.Clone(values)
	}
}

// HTTPHeader returns the stored headers as an http.Header, names as stored.
func (r *Response) HTTPHeader() http.Header {
	h := make(http.Header, len(r.Headers)+len(r.HeaderLists))
	for k, v := range r.Headers {
		h[k] = []string{v}
	}
	for k, v := range r.HeaderLists {
		h[k] = slices.Clone(v)
	}
	return h
}

// MarshalJSON writes "body" as "" when empty, and "headers" as {} when
// Headers is an empty map (a lookup shows a response stored without headers
// so); nil Headers and HeaderLists leave "headers" out.
func (r Response) MarshalJSON() ([]byte, error) {
	body := r.Body
	if body == nil {
		body = []byte{}
	}
	type plain struct {
		Status      int               `json:"status"`
		ContentType string            `json:"content_type"`
		Headers     map[string]string `json:"headers,omitempty"`
		Body        []byte            `json:"body"`
	}
	p := plain{Status: r.Status, ContentType: r.ContentType, Headers: r.Headers, Body: body}
	if len(r.HeaderLists) == 0 {
		if r.Headers != nil && len(r.Headers) == 0 {
			return Marshal(struct {
				Status      int               `json:"status"`
				ContentType string            `json:"content_type"`
				Headers     map[string]string `json:"headers"`
				Body        []byte            `json:"body"`
			}(p))
		}
		return Marshal(p)
	}
	all := make(map[string]any, len(r.Headers)+len(r.HeaderLists))
	for k, v := range r.Headers {
		all[k] = v
	}
	for k, v := range r.HeaderLists {
		all[k] = v
	}
	return Marshal(struct {
		plain
		Headers map[string]any `json:"headers"`
	}{p, all})
}

// UnmarshalJSON reads "headers" values of either form. It is lenient about
// members it does not know (a client reading a newer server); the server
// refuses them before it decodes.
func (r *Response) UnmarshalJSON(b []byte) error {
	// The members one by one rather than an embedded copy of Response, so
	// a type error names "response.status", not the copy's path.
	var p struct {
		Status      int                        `json:"status"`
		ContentType string                     `json:"content_type"`
		Headers     map[string]json.RawMessage `json:"headers"`
		Body        []byte                     `json:"body"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*r = Response{Status: p.Status, ContentType: p.ContentType, Body: p.Body}
	for _, k := range slices.Sorted(maps.Keys(p.Headers)) {
		raw := bytes.TrimLeft(p.Headers[k], " \t\r\n")
		switch {
		case len(raw) > 0 && raw[0] == '"':
			var v string
			if err := json.Unmarshal(raw, &v); err != nil {
				return fmt.Errorf("wire: response.headers[%q]: %w", k, err)
			}
			if r.Headers == nil {
				r.Headers = map[string]string{}
			}
			r.Headers[k] = v
		case len(raw) > 0 && raw[0] == '[':
			var v []*string // a null element would silently become ""
			if err := json.Unmarshal(raw, &v); err != nil || slices.Contains(v, nil) {
				return fmt.Errorf("wire: response.headers[%q] must be a string or an array of strings", k)
			}
			if r.HeaderLists == nil {
				r.HeaderLists = map[string][]string{}
			}
			vs := make([]string, len(v))
			for i, p := range v {
				vs[i] = *p
			}
			r.HeaderLists[k] = vs
		default:
			return fmt.Errorf("wire: response.headers[%q] must be a string or an array of strings", k)
		}
	}
	return nil
}

// ValidHeaderName reports whether k may name a stored response header: an
// RFC 9110 token. A stored header is replayed into a real response, so
// the store refuses what would split it (header injection).
func ValidHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// ValidHeaderValue reports whether v may be a stored header value (or
// content type): no control characters but horizontal tab. The store also
// wants UTF-8 (it stores JSON strings).
func ValidHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The batch's promise, held input by input: an op of POST /v1/batch is
// answered with the status and body its own route answers to the same
// input, for valid and hostile input alike, with auth off, with an app
// token limited to some principals and with an operator token. Each case
// is sent to one fresh node through its route and to another as the only
// op of a batch, after the same setup on both; answers are compared with
// times and tokens (which differ between two nodes by nature) replaced,
// and Retry-After by presence (its seconds may differ by one).

// member is one member of a JSON object as raw text: name with its quotes,
// value as JSON.
type member struct{ name, value string }

type members []member

func (ms members) render() string {
	var b strings.Builder
	b.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(m.name + ":" + m.value)
	}
	b.WriteByte('}')
	return b.String()
}

// set replaces the value of the member named name (raw, with quotes), or
// adds it.
func (ms members) set(name, value string) members {
	out := append(members(nil), ms...)
	for i := range out {
		if out[i].name == name {
			out[i].value = value
			return out
		}
	}
	return append(out, member{name, value})
}

func (ms members) add(name, value string) members {
	return append(append(members(nil), ms...), member{name, value})
}

func (ms members) del(name string) members {
	var out members
	for _, m := range ms {
		if m.name != name {
			out = append(out, m)
		}
	}
	return out
}

func (ms members) rename(from, to string) members {
	out := append(members(nil), ms...)
	for i := range out {
		if out[i].name == from {
			out[i].name = to
		}
	}
	return out
}

// query is the lookup's query for a get op's members, as a client would
// write it: each string member a parameter (its raw bytes percent-encoded,
// so invalid UTF-8 stays invalid, and a lone surrogate escape its WTF-8
// bytes), null an empty one. ok is false when a member has no query form
// (another JSON type).
func (ms members) query() (string, bool) {
	var parts []string
	for _, m := range ms {
		name, ok := jsonText(m.name)
		if !ok {
			return "", false
		}
		v, ok := jsonText(strings.ReplaceAll(m.value, `\ud800`, "\xed\xa0\x80"))
		if m.value == "null" {
			v, ok = "", true
		}
		if !ok {
			return "", false
		}
		parts = append(parts, urlEsc(name)+"="+urlEsc(v))
	}
	return strings.Join(parts, "&"), true
}

// jsonText is the text of a JSON string: its raw bytes when it has no
// escape, else as encoding/json reads it.
func jsonText(raw string) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	if !strings.Contains(raw, `\`) {
		return raw[1 : len(raw)-1], true
	}
	var s string
	return s, json.Unmarshal([]byte(raw), &s) == nil
}

type parityCase struct {
	name string
	kind string
	body members
	// op, when set, is the batch op's raw text; else the body with
	// "op":kind first.
	op string
	// needsToken: a claim of the case's scope is made first (on both
	// nodes, with a token that may act for every principal), and "$tok" in
	// the body is its token.
	needsToken bool
	// principal is the base principal of the case (raw JSON).
	principal string
}

func (c parityCase) batchOp() string {
	if c.op != "" {
		return c.op
	}
	return append(members{{`"op"`, strconv.Quote(c.kind)}}, c.body...).render()
}

const (
	parityAllowed   = `"cus_a1"`
	parityForbidden = `"evil"`
)

// jsonQ is s as a JSON string.
func jsonQ(s string) string { b, _ := json.Marshal(s); return string(b) }

// parityCases builds the corpus for one principal (raw JSON, allowed or
// not for the app token), keys numbered from key.
func parityCases(principal string, key func() string) []parityCase {
	var cases []parityCase
	addCase := func(name, kind string, body members, needsToken bool) {
		cases = append(cases, parityCase{name: kind + "/" + name, kind: kind, body: body, needsToken: needsToken})
	}
	resp := `{"status":201,"content_type":"application/json","headers":{"Location":"/p/1"},"body":"eyJpZCI6MX0="}`
	bases := map[string]members{
		"claim":    {{`"principal"`, principal}, {`"endpoint"`, `"POST /p"`}, {`"key"`, `"$key"`}, {`"fingerprint"`, `"9f86d081884c7d65"`}},
		"complete": {{`"principal"`, principal}, {`"endpoint"`, `"POST /p"`}, {`"key"`, `"$key"`}, {`"token"`, `"$tok"`}, {`"response"`, resp}},
		"release":  {{`"principal"`, principal}, {`"endpoint"`, `"POST /p"`}, {`"key"`, `"$key"`}, {`"token"`, `"$tok"`}},
		"extend":   {{`"principal"`, principal}, {`"endpoint"`, `"POST /p"`}, {`"key"`, `"$key"`}, {`"token"`, `"$tok"`}, {`"lease_ms"`, `60000`}},
		"get":      {{`"principal"`, principal}, {`"endpoint"`, `"POST /p"`}, {`"key"`, `"$key"`}},
	}
	long := jsonQ(strings.Repeat("x", 256))
	for _, kind := range []string{"claim", "complete", "release", "extend", "get"} {
		base := bases[kind]
		tok := kind != "claim" // a get finds the claimed record
		mut := map[string]members{
			"valid":                             base,
			"unknown member":                    base.add(`"foo"`, `1`),
			"unknown member string":             base.add(`"foo"`, `"bar"`),
			"case-folded principal":             base.rename(`"principal"`, `"Principal"`),
			"case-folded key":                   base.rename(`"key"`, `"KEY"`),
			"escaped member name":               base.rename(`"principal"`, `"princip\u0061l"`),
			"escaped key name":                  base.rename(`"key"`, `"\u006bey"`),
			"principal twice, allowed last":     base.add(`"principal"`, parityAllowed),
			"principal twice, forbidden last":   base.add(`"principal"`, parityForbidden),
			"key twice":                         base.add(`"key"`, `"other"`),
			"principal number":                  base.set(`"principal"`, `5`),
			"principal null":                    base.set(`"principal"`, `null`),
			"principal missing":                 base.del(`"principal"`),
			"principal empty":                   base.set(`"principal"`, `""`),
			"principal 256 bytes":               base.set(`"principal"`, long),
			"principal control":                 base.set(`"principal"`, `"cus_a\u0001"`),
			"principal invalid UTF-8":           base.set(`"principal"`, "\"cus_a\xff\""),
			"principal invalid UTF-8 forbidden": base.set(`"principal"`, "\"x\xff\""),
			"principal lone surrogate":          base.set(`"principal"`, `"cus_a\ud800"`),
			"principal escaped":                 base.set(`"principal"`, strings.Replace(principal, "c", `\u0063`, 1)),
			"endpoint missing":                  base.del(`"endpoint"`),
			"endpoint object":                   base.set(`"endpoint"`, `{}`),
			"endpoint invalid UTF-8":            base.set(`"endpoint"`, "\"POST \xfe\""),
			"key empty":                         base.set(`"key"`, `""`),
			"key missing":                       base.del(`"key"`),
			"key true":                          base.set(`"key"`, `true`),
			"key null":                          base.set(`"key"`, `null`),
			"key 256 bytes":                     base.set(`"key"`, long),
			"key non-ASCII":                     base.set(`"key"`, `"k\u00e9"`),
			"key invalid UTF-8":                 base.set(`"key"`, "\"k\xff\""),
			"key array":                         base.set(`"key"`, `["k"]`),
		}
		switch kind {
		case "claim":
			for n, b := range map[string]members{
				"fingerprint odd":        base.set(`"fingerprint"`, `"abc"`),
				"fingerprint not hex":    base.set(`"fingerprint"`, `"zz"`),
				"fingerprint 130":        base.set(`"fingerprint"`, jsonQ(strings.Repeat("ab", 65))),
				"fingerprint array":      base.set(`"fingerprint"`, `[]`),
				"lease_ms null":          base.add(`"lease_ms"`, `null`),
				"lease_ms string":        base.add(`"lease_ms"`, `"1000"`),
				"lease_ms 0":             base.add(`"lease_ms"`, `0`),
				"lease_ms 99":            base.add(`"lease_ms"`, `99`),
				"lease_ms 3600001":       base.add(`"lease_ms"`, `3600001`),
				"lease_ms 1.5":           base.add(`"lease_ms"`, `1000.5`),
				"lease_ms 1e3":           base.add(`"lease_ms"`, `1e3`),
				"lease_ms huge":          base.add(`"lease_ms"`, `99999999999999999999`),
				"lease_ms ok":            base.add(`"lease_ms"`, `5000`),
				"claim_id 256":           base.add(`"claim_id"`, long),
				"claim_id null":          base.add(`"claim_id"`, `null`),
				"claim_id invalid UTF-8": base.add(`"claim_id"`, "\"a\xff\""),
				"correlation_id ok":      base.add(`"correlation_id"`, `"req-<1>&"`),
				"correlation_id number":  base.add(`"correlation_id"`, `7`),
			} {
				mut[n] = b
			}
		case "complete":
			for n, b := range map[string]members{
				"response missing":         base.del(`"response"`),
				"response null":            base.set(`"response"`, `null`),
				"response string":          base.set(`"response"`, `"x"`),
				"response status 99":       base.set(`"response"`, `{"status":99}`),
				"response status string":   base.set(`"response"`, `{"status":"200"}`),
				"response body not b64":    base.set(`"response"`, `{"status":200,"body":"!!"}`),
				"response unknown member":  base.set(`"response"`, `{"status":200,"x":1}`),
				"response header list":     base.set(`"response"`, `{"status":200,"headers":{"Set-Cookie":["a=1","b=2"]}}`),
				"response header bad name": base.set(`"response"`, `{"status":200,"headers":{"a b":"1"}}`),
				"response header CRLF":     base.set(`"response"`, `{"status":200,"headers":{"X":"a\r\nb"}}`),
				"response too large":       base.set(`"response"`, `{"status":200,"body":"`+strings.Repeat("QUFB", 22000)+`"}`),
				"response status twice":    base.set(`"response"`, `{"status":200,"status":201}`),
			} {
				mut[n] = b
			}
		case "extend":
			for n, b := range map[string]members{
				"lease_ms missing": base.del(`"lease_ms"`),
				"lease_ms null":    base.set(`"lease_ms"`, `null`),
				"lease_ms 99":      base.set(`"lease_ms"`, `99`),
				"lease_ms string":  base.set(`"lease_ms"`, `"60000"`),
			} {
				mut[n] = b
			}
		case "release":
			for n, b := range map[string]members{
				"reason ok":           base.add(`"reason"`, `"handler failed"`),
				"reason 256":          base.add(`"reason"`, long),
				"reason invalid UTF8": base.add(`"reason"`, "\"r\xff\""),
				"reason number":       base.add(`"reason"`, `1`),
			} {
				mut[n] = b
			}
		case "get":
			for n, b := range map[string]members{
				"stale":                            base.add(`"consistency"`, `"stale"`),
				"linearizable":                     base.add(`"consistency"`, `"linearizable"`),
				"consistency bogus":                base.add(`"consistency"`, `"eventual"`),
				"consistency empty":                base.add(`"consistency"`, `""`),
				"consistency number":               base.add(`"consistency"`, `1`),
				"consistency null":                 base.add(`"consistency"`, `null`),
				"consistency misspelt":             base.add(`"consistancy"`, `"stale"`),
				"consistency twice":                base.add(`"consistency"`, `"stale"`).add(`"consistency"`, `"stale"`),
				"principal twice, forbidden first": base.set(`"principal"`, parityForbidden).add(`"principal"`, parityAllowed),
			} {
				mut[n] = b
			}
		}
		if kind != "claim" && kind != "get" {
			for n, b := range map[string]members{
				"token missing":   base.del(`"token"`),
				"token empty":     base.set(`"token"`, `""`),
				"token null":      base.set(`"token"`, `null`),
				"token number":    base.set(`"token"`, `5`),
				"token garbage":   base.set(`"token"`, `"abc"`),
				"token bare":      base.set(`"token"`, `"1"`),
				"token forged":    base.set(`"token"`, `"00000000000000000001.00000000000000000000000000000000"`),
				"token 256 bytes": base.set(`"token"`, long),
			} {
				mut[n] = b
			}
		}
		for n, b := range mut {
			addCase(n, kind, b, tok)
		}
		// Members in other cases and forms, and none at all.
		for n, b := range map[string]members{
			"no members":                nil,
			"member name invalid UTF-8": base.add("\"principal\xff\"", `"x"`),
			"member name empty":         base.add(`""`, `"x"`),
			"member name escaped quote": base.add(`"\"principal"`, `"x"`),
			"member op in case":         base.add(`"Op"`, jsonQ(kind)),
			"nested escaped names":      base.add(`"x"`, `{"princip\u0061l":"evil"}`),
		} {
			addCase(n, kind, b, tok)
		}
		if kind == "claim" {
			// A record already there: 409 with Retry-After, 422, replay.
			addCase("in progress", kind, base, true)
			addCase("fingerprint mismatch", kind, base.set(`"fingerprint"`, `"60303ae22b998861"`), true)
			addCase("same claim_id", kind, base.add(`"claim_id"`, `"c1"`), true)
		}
		// The op's own member in other places and forms: the route's body
		// is the same, so the answer must be too.
		opLast := append(append(members(nil), base...), member{`"op"`, strconv.Quote(kind)})
		cases = append(cases,
			parityCase{name: kind + "/op last", kind: kind, body: base, op: opLast.render(), needsToken: tok},
			parityCase{name: kind + "/op escaped name", kind: kind, body: base, op: append(members{{`"\u006fp"`, strconv.Quote(kind)}}, base...).render(), needsToken: tok},
			parityCase{name: kind + "/op escaped value", kind: kind, body: base, op: append(members{{`"op"`, `"` + `\u00` + fmt.Sprintf("%02x", kind[0]) + kind[1:] + `"`}}, base...).render(), needsToken: tok},
			parityCase{name: kind + "/op spaced", kind: kind, body: base, op: "{ \"op\" :\n" + strconv.Quote(kind) + " ,\t" + base.render()[1:], needsToken: tok},
		)
	}
	// Each case its own record.
	for i := range cases {
		k := key()
		cases[i].body = append(members(nil), cases[i].body...)
		for j := range cases[i].body {
			cases[i].body[j].value = strings.ReplaceAll(cases[i].body[j].value, "$key", k)
		}
		cases[i].op = strings.ReplaceAll(cases[i].op, "$key", k)
		cases[i].principal = principal
	}
	return cases
}

// setupScope is the scope a case's setup claims: the case's base scope.
func (c parityCase) setupScope() (scope, bool) {
	for _, m := range c.body {
		if m.name == `"key"` {
			if k, ok := jsonText(m.value); ok && strings.HasPrefix(k, "pk-") {
				p, _ := jsonText(c.principal)
				return scope{p, "POST /p", k}, true
			}
		}
	}
	return scope{}, false
}

// parityAnswer is an answer normalised for comparison.
type parityAnswer struct {
	status int
	code   string
	norm   string
}

func answerOf(status int, body []byte, retry int) parityAnswer {
	var p struct {
		Code string `json:"code"`
	}
	json.Unmarshal(body, &p)
	return parityAnswer{status: status, code: p.Code, norm: normal(status, body, retry)}
}

func TestBatchOpAnswersAsItsRoute(t *testing.T) {
	t.Parallel()
	// The token of the ops: none (auth off), an app token limited to
	// cus_a* and exact_b, an operator token (every principal).
	for _, token := range []string{"", appToken, operatorToken} {
		auth := token == appToken // the mode in which a principal can be refused
		t.Run(fmt.Sprintf("token=%q", token), func(t *testing.T) {
			var opts []nodeOpt
			if token != "" {
				opts = append(opts, withAuthFile(t, authFile()))
			}
			route, batch := mustNode(t, opts...), mustNode(t, opts...)
			setupR, setupB := route, batch
			if token != "" {
				route, batch = route.as(token), batch.as(token)
				setupR, setupB = setupR.as(operatorToken), setupB.as(operatorToken)
			}
			n := 0
			key := func() string { n++; return fmt.Sprintf("pk-%d", n) }
			var all []parityCase
			for _, principal := range []string{parityAllowed, parityForbidden} {
				for _, c := range parityCases(principal, key) {
					c.name = principal + " " + c.name
					all = append(all, c)
				}
			}
			mismatches := 0
			seen := map[string]int{} // the route's answers, to show the corpus reaches them
			for _, c := range all {
				toks := [2]string{}
				if c.needsToken {
					if s, ok := c.setupScope(); ok {
						for i, nd := range []*testNode{setupR, setupB} {
							r := nd.claim(s, fp1)
							require.Equal(t, 201, r.status, "%s: setup claim: %s", c.name, r)
							toks[i] = r.obj(t)["token"].(string)
						}
					}
				}
				body := func(i int, s string) string { return strings.ReplaceAll(s, "$tok", toks[i]) }

				var ra parityAnswer
				if c.kind == "get" {
					qs, ok := c.body.query()
					if !ok {
						// No query form: the op is refused whatever it asks
						// (a wrong JSON type), unless refused first as the
						// route would (a principal outside the token's).
						b := batch.batchRaw(body(1, c.batchOp()))
						want := []int{400}
						if auth && c.principal == parityForbidden {
							want = append(want, 403)
						}
						if !slices.Contains(want, b.status) {
							t.Errorf("%s: batch op with no query form answered %d %s", c.name, b.status, b.norm)
						}
						continue
					}
					r := route.do("GET", "/v1/records?"+qs, nil)
					ra = answerOf(r.status, r.raw, retryHeader(r))
				} else {
					r := route.post("/v1/"+c.kind, body(0, c.body.render()))
					ra = answerOf(r.status, r.raw, retryHeader(r))
				}
				ba := batch.batchRaw(body(1, c.batchOp()))
				seen[fmt.Sprintf("%d %s retry=%v", ra.status, ra.code, strings.Contains(ra.norm, "retry=true"))]++
				switch {
				case ra.status != ba.status || ra.code != ba.code:
					mismatches++
					t.Errorf("%s: route %d %s, batch %d %s\n  route: %s\n  batch: %s\n  op: %q", c.name, ra.status, ra.code, ba.status, ba.code, ra.norm, ba.norm, body(1, c.batchOp()))
				case ra.norm != ba.norm:
					mismatches++
					t.Errorf("%s: same status and code, other body\n  route: %s\n  batch: %s", c.name, ra.norm, ba.norm)
				}
			}
			t.Logf("%d cases, %d mismatches; route answers: %v", len(all), mismatches, seen)
		})
	}
}

func retryHeader(r reply) int {
	n, _ := strconv.Atoi(r.header.Get("Retry-After"))
	return n
}

// batchRaw sends one op, as raw text, as a batch and returns its result.
func (n *testNode) batchRaw(op string) parityAnswer {
	n.tb.Helper()
	r := n.post("/v1/batch", `{"ops":[`+op+`]}`)
	if r.status != http.StatusOK {
		return answerOf(r.status, r.raw, retryHeader(r))
	}
	var out struct{ Results []batchResult }
	require.NoError(n.tb, json.NewDecoder(bytes.NewReader(r.raw)).Decode(&out), "%s", r)
	require.Len(n.tb, out.Results, 1)
	return answerOf(out.Results[0].Status, out.Results[0].Body, out.Results[0].RetryAfter)
}

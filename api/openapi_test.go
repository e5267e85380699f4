package api_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// The OpenAPI document is checked against what the server registers and
// answers, never against a hand list: the routes, methods, statuses and
// problem codes come from the api package's own source (its route and mux
// registrations, its newProblem and writeJSON calls, its code constants)
// and from asking a real node. A route, status or code added to the server
// without docs/openapi.yaml fails here.

const openapiPath = "../docs/openapi.yaml"

// spec is docs/openapi.yaml decoded, with $ref resolution.
type spec struct{ root map[string]any }

func loadSpec(t *testing.T) spec {
	t.Helper()
	raw, err := os.ReadFile(openapiPath)
	require.NoError(t, err)
	var root map[string]any
	require.NoError(t, yaml.Unmarshal(raw, &root), "docs/openapi.yaml is not YAML")
	require.Equal(t, "3.1.0", fmt.Sprint(root["openapi"]))
	return spec{root}
}

// get follows a path of map keys.
func get(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

// resolve follows a local $ref.
func (s spec) resolve(t *testing.T, v any) any {
	t.Helper()
	for i := 0; i < 10; i++ {
		ref, ok := get(v, "$ref").(string)
		if !ok {
			return v
		}
		require.True(t, strings.HasPrefix(ref, "#/"), "only local $refs: %s", ref)
		v = get(s.root, strings.Split(strings.TrimPrefix(ref, "#/"), "/")...)
		require.NotNil(t, v, "dangling $ref %s", ref)
	}
	t.Fatalf("$ref loop")
	return nil
}

// operation is the yaml's operation for path and method (lower case), or nil.
func (s spec) operation(path, method string) map[string]any {
	op, _ := get(s.root, "paths", path, strings.ToLower(method)).(map[string]any)
	return op
}

// responses maps each status of an operation to the problem codes its
// problem document may carry (empty for a success answer).
func (s spec) responses(t *testing.T, op map[string]any) map[int][]string {
	t.Helper()
	out := map[int][]string{}
	rs, _ := op["responses"].(map[string]any)
	for st, r := range rs {
		status, err := strconv.Atoi(st)
		require.NoError(t, err, "response status %q", st)
		out[status] = s.codes(t, get(s.resolve(t, r), "content", "application/problem+json", "schema"))
	}
	return out
}

// mediaTypes lists the content types one response of op declares.
func (s spec) mediaTypes(t *testing.T, op map[string]any, status int) []string {
	r := s.resolve(t, get(op, "responses", strconv.Itoa(status)))
	c, _ := get(r, "content").(map[string]any)
	var out []string
	for k := range c {
		out = append(out, k)
	}
	return out
}

// codes collects the `code` enums and consts of a problem schema.
func (s spec) codes(t *testing.T, schema any) []string {
	if schema == nil {
		return nil
	}
	schema = s.resolve(t, schema)
	var out []string
	if all, ok := get(schema, "allOf").([]any); ok {
		for _, sub := range all {
			if get(sub, "$ref") == nil { // an inline narrowing of the referenced Problem
				out = append(out, s.codes(t, sub)...)
			}
		}
		if len(out) > 0 {
			return out // the narrowed enum, not the Problem schema's full list
		}
		for _, sub := range all {
			out = append(out, s.codes(t, sub)...)
		}
		return out
	}
	code := get(schema, "properties", "code")
	if c, ok := get(code, "const").(string); ok {
		out = append(out, c)
	}
	if e, ok := get(code, "enum").([]any); ok {
		for _, c := range e {
			out = append(out, fmt.Sprint(c))
		}
	}
	return out
}

// served is what the api package's source registers and can answer.
type served struct {
	routes   map[string][]string // path -> methods; nil methods for a bare mux registration
	codes    map[string]string   // code constant name -> code
	problems map[[2]string]token.Position
	statuses map[int]token.Position // statuses written without a problem
}

// statusByName maps net/http's constant names (StatusConflict) to codes,
// derived from http.StatusText so no table is kept by hand.
func statusByName() map[string]int {
	m := map[string]int{}
	for c := 100; c < 600; c++ {
		if txt := http.StatusText(c); txt != "" {
			name := strings.NewReplacer(" ", "", "-", "", "'", "").Replace(txt)
			m["Status"+name] = c
		}
	}
	return m
}

func parseServed(t *testing.T) served {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var parsed []*ast.File
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		require.NoError(t, err)
		parsed = append(parsed, af)
	}
	require.NotEmpty(t, parsed)
	sv := served{routes: map[string][]string{}, codes: map[string]string{},
		problems: map[[2]string]token.Position{}, statuses: map[int]token.Position{}}
	for _, f := range parsed { // constants first: calls name them
		ast.Inspect(f, func(n ast.Node) bool {
			if vs, ok := n.(*ast.ValueSpec); ok {
				for i, name := range vs.Names {
					if strings.HasPrefix(name.Name, "code") && i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							sv.codes[name.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
			return true
		})
	}
	require.Contains(t, sv.codes, "codeInProgress", "the code constants were not found: has api/problem.go changed shape?")
	byName := statusByName()
	status := func(e ast.Expr) (int, bool) {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok || fmt.Sprint(sel.X) != "http" || !strings.HasPrefix(sel.Sel.Name, "Status") {
			return 0, false
		}
		c, ok := byName[sel.Sel.Name]
		require.True(t, ok, "unknown status constant http.%s", sel.Sel.Name)
		return c, true
	}
	str := func(e ast.Expr) string {
		lit, ok := e.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return ""
		}
		s, _ := strconv.Unquote(lit.Value)
		return s
	}
	for _, f := range parsed {
		var fn *ast.FuncDecl // the declaration being walked
		ast.Inspect(f, func(n ast.Node) bool {
			if d, ok := n.(*ast.FuncDecl); ok {
				fn = d
			}
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			pos := fset.Position(call.Pos())
			var name string
			switch f := call.Fun.(type) {
			case *ast.Ident:
				name = f.Name
			case *ast.SelectorExpr:
				name = f.Sel.Name
				if x, ok := f.X.(*ast.SelectorExpr); ok && x.Sel.Name == "mux" && (name == "HandleFunc" || name == "Handle") {
					name = "mux"
				}
			}
			switch name {
			case "route":
				if len(call.Args) == 3 {
					path := str(call.Args[0])
					sel, ok := call.Args[1].(*ast.SelectorExpr)
					require.True(t, ok && path != "", "%s: route registration not of the form route(\"/path\", http.MethodX, h)", pos)
					m := strings.ToUpper(strings.TrimPrefix(sel.Sel.Name, "Method"))
					sv.routes[path] = append(sv.routes[path], m)
				}
			case "mux":
				if fn != nil && fn.Name.Name == "route" {
					return true // route's own registration of its path argument
				}
				path := str(call.Args[0])
				require.NotEmpty(t, path, "%s: mux registration with a non-literal path", pos)
				if _, ok := sv.routes[path]; !ok {
					sv.routes[path] = nil
				}
			case "newProblem":
				st, ok := status(call.Args[0])
				require.True(t, ok, "%s: newProblem with a status that is not an http.Status constant", pos)
				id, ok := call.Args[1].(*ast.Ident)
				require.True(t, ok, "%s: newProblem with a code that is not a code constant", pos)
				code, ok := sv.codes[id.Name]
				require.True(t, ok, "%s: newProblem with unknown code %s", pos, id.Name)
				sv.problems[[2]string{strconv.Itoa(st), code}] = pos
			case "writeJSON", "WriteHeader":
				for _, a := range call.Args {
					if st, ok := status(a); ok {
						sv.statuses[st] = pos
					}
				}
			}
			return true
		})
	}
	require.Contains(t, sv.routes, "/v1/claim", "no route registrations found: has api/server.go changed shape?")
	return sv
}

// TestOpenAPIDocumentsEveryRouteStatusAndCode checks docs/openapi.yaml
// against the server's source: every registered route and method, every
// problem code, every (status, code) a handler can answer and every
// success status is documented.
func TestOpenAPIDocumentsEveryRouteStatusAndCode(t *testing.T) {
	s := loadSpec(t)
	sv := parseServed(t)

	for path, methods := range sv.routes {
		if path == "/" {
			continue // the catch-all 404 for unknown paths
		}
		require.NotNil(t, get(s.root, "paths", path), "route %s is served but not in docs/openapi.yaml", path)
		for _, m := range methods {
			require.NotNil(t, s.operation(path, m), "%s %s is served but not in docs/openapi.yaml", m, path)
		}
	}

	documented := map[int][]string{} // every status -> codes, over all operations
	paths, _ := get(s.root, "paths").(map[string]any)
	for path := range paths {
		for _, m := range []string{"get", "head", "post", "put", "patch", "delete"} {
			if op := s.operation(path, m); op != nil {
				for st, codes := range s.responses(t, op) {
					documented[st] = append(documented[st], codes...)
				}
			}
		}
	}
	var all []string
	for _, c := range get(s.root, "components", "schemas", "Problem", "properties", "code", "enum").([]any) {
		all = append(all, fmt.Sprint(c))
	}
	for name, code := range sv.codes {
		require.Contains(t, all, code, "problem code %q (%s) is not in the Problem schema's code enum", code, name)
	}
	for pc, pos := range sv.problems {
		st, _ := strconv.Atoi(pc[0])
		require.Contains(t, documented, st, "%s: status %d is answered but no operation documents it", pos, st)
		require.Contains(t, documented[st], pc[1], "%s: %d %s is answered but no operation documents it", pos, st, pc[1])
	}
	for st, pos := range sv.statuses {
		require.Contains(t, documented, st, "%s: status %d is answered but no operation documents it", pos, st)
	}
}

// TestOpenAPIMatchesARealNode asks a real node every method of every
// registered route: a method the node takes (anything but 405) must be
// documented for that path, with the status and problem code it answered
// and its content type; a method it refuses must not be documented.
func TestOpenAPIMatchesARealNode(t *testing.T) {
	s := loadSpec(t)
	sv := parseServed(t)
	n := mustNode(t)

	paths, _ := get(s.root, "paths").(map[string]any)
	for path := range paths {
		_, ok := sv.routes[path]
		require.True(t, ok, "docs/openapi.yaml documents %s, which the server does not register", path)
	}
	for path := range sv.routes {
		if path == "/" {
			continue
		}
		for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"} {
			var body any
			if m == "POST" || m == "PUT" || m == "PATCH" {
				body = "{}"
			}
			r := n.do(m, path, body)
			doc := m
			if m == "HEAD" {
				doc = "GET" // HEAD is answered wherever GET is
			}
			op := s.operation(path, doc)
			if r.status == http.StatusMethodNotAllowed {
				require.Nil(t, s.operation(path, m), "%s %s is documented but the node answers 405", m, path)
				require.NotEmpty(t, r.header.Get("Allow"), "%s %s: 405 without Allow", m, path)
				continue
			}
			require.NotNil(t, op, "%s %s answered %s but is not in docs/openapi.yaml", m, path, r)
			resps := s.responses(t, op)
			require.Contains(t, resps, r.status, "%s %s answered %s, a status its operation does not document", m, path, r)
			if ct := r.header.Get("Content-Type"); ct != "" && m != "HEAD" {
				mt, _, err := mime.ParseMediaType(ct)
				require.NoError(t, err)
				require.True(t, slices.Contains(s.mediaTypes(t, op, r.status), mt),
					"%s %s answered %d as %s, not a documented content type", m, path, r.status, mt)
				if mt == "application/problem+json" {
					code := fmt.Sprint(r.obj(t)["code"])
					require.Contains(t, resps[r.status], code, "%s %s answered %s, a code its %d does not document", m, path, r, r.status)
				}
			}
		}
	}
}

// TestOpenAPISchemasComposeForGenerators checks what a client generator
// (oapi-codegen, openapi-generator) needs of docs/openapi.yaml and the
// server's checks above cannot see:
//   - a discriminator maps every branch of its oneOf, each a $ref (with
//     inline branches oapi-codegen refused the whole document: "not all
//     schemas were mapped");
//   - a schema that closes its members (unevaluatedProperties: false) is
//     not reused inside another schema's allOf: there it refuses the
//     members the outer schema adds, as it refused every batch op's "op";
//   - no schema is named after an operation's answer wrapper
//     (operationId "batch" and a schema BatchResponse did not compile).
func TestOpenAPISchemasComposeForGenerators(t *testing.T) {
	s := loadSpec(t)
	schemas, _ := get(s.root, "components", "schemas").(map[string]any)
	require.NotEmpty(t, schemas)
	closed := map[string]bool{}
	for name, v := range schemas {
		if get(v, "unevaluatedProperties") == false {
			closed["#/components/schemas/"+name] = true
		}
	}
	var walk func(where string, v any)
	walk = func(where string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if d, ok := v["discriminator"].(map[string]any); ok {
				mapping, _ := d["mapping"].(map[string]any)
				mapped := map[string]bool{}
				for _, ref := range mapping {
					mapped[fmt.Sprint(ref)] = true
				}
				branches, _ := v["oneOf"].([]any)
				require.NotEmpty(t, branches, "%s: a discriminator without oneOf", where)
				for i, b := range branches {
					ref, ok := get(b, "$ref").(string)
					require.True(t, ok, "%s: oneOf branch %d of a discriminator is not a $ref", where, i)
					require.True(t, mapped[ref], "%s: the discriminator's mapping leaves out %s", where, ref)
				}
			}
			if all, ok := v["allOf"].([]any); ok && len(all) > 1 || ok && (v["properties"] != nil || v["required"] != nil) {
				for _, sub := range all {
					ref, _ := get(sub, "$ref").(string)
					require.False(t, closed[ref], "%s: allOf reuses %s, whose unevaluatedProperties: false refuses the members added beside it", where, ref)
				}
			}
			for k, sub := range v {
				walk(where+"/"+k, sub)
			}
		case []any:
			for i, sub := range v {
				walk(fmt.Sprintf("%s/%d", where, i), sub)
			}
		}
	}
	walk("#", s.root)

	paths, _ := get(s.root, "paths").(map[string]any)
	for path := range paths {
		for _, m := range []string{"get", "head", "post", "put", "patch", "delete"} {
			op := s.operation(path, m)
			if op == nil {
				continue
			}
			id, _ := op["operationId"].(string)
			require.NotEmpty(t, id, "%s %s has no operationId", m, path)
			wrapper := strings.ToUpper(id[:1]) + id[1:] + "Response"
			require.NotContains(t, schemas, wrapper, "schema %s has the name a generated client gives the answer of operation %q", wrapper, id)
		}
	}
}

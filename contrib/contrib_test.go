package contrib_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/idem-store/idem/api"
	"github.com/idem-store/idem/certgen"
	"github.com/idem-store/idem/engine"
	"github.com/idem-store/idem/raftfsm"
)

const (
	rulesFile     = "prometheus/idem-alerts.yml"
	rulesTestFile = "prometheus/idem-alerts.test.yml"
	dashboardFile = "grafana/idem-dashboard.json"
)

// synthesised are series Prometheus makes itself rather than scraping.
var synthesised = map[string]bool{"up": true}

// series is one sample line of the exposition: its metric name and labels.
type series struct {
	name   string
	labels map[string]string
	value  float64
}

// scrape is what /metrics answered, by metric name.
type scrape map[string][]series

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
	// selector finds the metric names an expression reads (every idem
	// metric starts with idem_; the dashboard also reads process_*), with
	// their label matchers if any.
	selector = regexp.MustCompile(`\b((?:idem|process|go)_[a-zA-Z0-9_:]*|up)\b(\{[^}]*\})?`)
	matcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
)

func parseExposition(t *testing.T, text string) scrape {
	t.Helper()
	out := scrape{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		require.NotNil(t, m, "not an exposition sample line: %q", line)
		s := series{name: m[1], labels: map[string]string{}}
		for _, p := range labelPair.FindAllStringSubmatch(m[2], -1) {
			s.labels[p[1]] = p[2]
		}
		v, err := strconv.ParseFloat(m[3], 64)
		require.NoError(t, err, "sample value in %q", line)
		s.value = v
		out[s.name] = append(out[s.name], s)
	}
	require.NoError(t, sc.Err())
	return out
}

// value is the value of the one unlabelled series of name.
func (s scrape) value(t *testing.T, name string) float64 {
	t.Helper()
	require.Len(t, s[name], 1, "%s: want exactly one series", name)
	return s[name][0].value
}

// reference is one metric an operator file reads, with the label values it
// asks for by exact match.
type reference struct {
	where  string // file and rule or panel, for the error message
	name   string
	labels map[string]string
	// alts are the values of a regex matcher made of plain alternatives
	// (outcome=~"quota_exceeded|principal_limit"): each must exist, or a
	// misspelt one matches nothing and its alert never fires.
	alts map[string][]string
}

// plainAlts is a regex matcher that is only literal alternatives.
var plainAlts = regexp.MustCompile(`^[a-zA-Z0-9_:.-]+(\|[a-zA-Z0-9_:.-]+)*$`)

// references returns every metric expr reads. Labels that Prometheus adds
// at scrape time (job, instance) and Grafana variables are not checked.
func references(where, expr string) []reference {
	var out []reference
	for _, m := range selector.FindAllStringSubmatch(expr, -1) {
		r := reference{where: where, name: m[1], labels: map[string]string{}, alts: map[string][]string{}}
		for _, lm := range matcher.FindAllStringSubmatch(m[2], -1) {
			if lm[1] == "job" || lm[1] == "instance" || strings.Contains(lm[3], "$") {
				continue
			}
			switch {
			case lm[2] == "=":
				r.labels[lm[1]] = lm[3]
			case lm[2] == "=~" && plainAlts.MatchString(lm[3]):
				r.alts[lm[1]] = strings.Split(lm[3], "|")
			}
		}
		out = append(out, r)
	}
	return out
}

// missing lists every reference the scrape does not hold.
func (s scrape) missing(refs []reference) (bad []string) {
	for _, r := range refs {
		if synthesised[r.name] {
			continue
		}
		got, ok := s[r.name]
		if !ok {
			bad = append(bad, fmt.Sprintf("%s: metric %s is not in /metrics", r.where, r.name))
			continue
		}
		has := func(k, v string) bool {
			for _, g := range got {
				if g.labels[k] == v {
					return true
				}
			}
			return false
		}
		for k, v := range r.labels {
			if !has(k, v) {
				bad = append(bad, fmt.Sprintf("%s: no series %s{%s=%q} in /metrics", r.where, r.name, k, v))
			}
		}
		for k, vs := range r.alts {
			for _, v := range vs {
				if !has(k, v) {
					bad = append(bad, fmt.Sprintf("%s: no series %s{%s=%q} in /metrics (one of %s=~%q)", r.where, r.name, k, v, k, strings.Join(vs, "|")))
				}
			}
		}
	}
	return bad
}

// check fails for every reference the scrape does not hold.
func (s scrape) check(t *testing.T, refs []reference) {
	t.Helper()
	for _, b := range s.missing(refs) {
		t.Error(b)
	}
}

// TestReferencesAreFound keeps the checker itself honest: a misspelled
// metric or label value must be reported.
func TestReferencesAreFound(t *testing.T) {
	refs := references("x", `sum(rate(idem_claims_total{job=~"$job",outcome="claimed"}[5m])) / idem_records + up`)
	names := []string{}
	for _, r := range refs {
		names = append(names, r.name)
	}
	require.Equal(t, []string{"idem_claims_total", "idem_records", "up"}, names)
	require.Equal(t, map[string]string{"outcome": "claimed"}, refs[0].labels)

	s := scrape{"idem_claims_total": {{name: "idem_claims_total", labels: map[string]string{"outcome": "claimed"}}}}
	bad := s.missing(references("x", `idem_claims_total{outcome="claimd"} + idem_recrods + up`))
	require.Equal(t, []string{
		`x: no series idem_claims_total{outcome="claimd"} in /metrics`,
		`x: metric idem_recrods is not in /metrics`,
	}, bad, "a misspelled label value and metric must be reported")

	bad = s.missing(references("x", `idem_claims_total{outcome=~"claimed|quota_exeeded"} + idem_claims_total{outcome=~"claim.*"}`))
	require.Equal(t, []string{
		`x: no series idem_claims_total{outcome="quota_exeeded"} in /metrics (one of outcome=~"claimed|quota_exeeded")`,
	}, bad, "a misspelled alternative of a regex matcher must be reported; a real regex is not checked")
}

// loadRuleTests returns the series the rules' unit tests feed promtool: a
// test that feeds a metric or label value the server never exports passes
// while the alert it tests stays silent in production.
func loadRuleTests(t *testing.T) []reference {
	t.Helper()
	b, err := os.ReadFile(rulesTestFile)
	require.NoError(t, err)
	var f struct {
		Tests []struct {
			InputSeries []struct {
				Series string `yaml:"series"`
			} `yaml:"input_series"`
		} `yaml:"tests"`
	}
	require.NoError(t, yaml.Unmarshal(b, &f), "%s", rulesTestFile)
	var refs []reference
	for i, tc := range f.Tests {
		for _, in := range tc.InputSeries {
			where := fmt.Sprintf("%s test %d series %s", rulesTestFile, i+1, in.Series)
			rr := references(where, in.Series)
			require.NotEmpty(t, rr, "%s names no metric", where)
			refs = append(refs, rr...)
		}
	}
	require.NotEmpty(t, refs)
	return refs
}

// alertRules is the shape of a Prometheus rule file.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

var promDuration = regexp.MustCompile(`^([0-9]+(ms|s|m|h|d|w|y))+$`)

// loadRules parses the alert rules and checks what Prometheus would refuse
// or what an on-call reader needs; it returns the metrics they read.
func loadRules(t *testing.T) []reference {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	var f alertRules
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true) // a misspelled key (e.g. "annotation") is an error, not ignored
	require.NoError(t, dec.Decode(&f), "%s is not a valid rule file", rulesFile)
	require.NotEmpty(t, f.Groups)
	var refs []reference
	seen := map[string]bool{}
	for _, g := range f.Groups {
		require.NotEmpty(t, g.Name)
		require.NotEmpty(t, g.Rules, "group %s", g.Name)
		for _, r := range g.Rules {
			where := fmt.Sprintf("%s alert %s", rulesFile, r.Alert)
			require.NotEmpty(t, r.Alert, "%s: every rule is an alert", rulesFile)
			require.False(t, seen[r.Alert], "%s: alert %s defined twice", rulesFile, r.Alert)
			seen[r.Alert] = true
			require.NotEmpty(t, strings.TrimSpace(r.Expr), where)
			if r.For != "" {
				require.Regexp(t, promDuration, r.For, "%s: for", where)
			}
			require.Contains(t, []string{"critical", "warning", "info"}, r.Labels["severity"], "%s: severity", where)
			require.NotEmpty(t, r.Annotations["summary"], "%s: summary", where)
			require.NotEmpty(t, r.Annotations["description"], "%s: description", where)
			rr := references(where, r.Expr)
			require.NotEmpty(t, rr, "%s reads no metric", where)
			refs = append(refs, rr...)
		}
	}
	return refs
}

// loadDashboard parses the Grafana dashboard, checks its layout and
// returns the metrics its panels and variables read.
func loadDashboard(t *testing.T) []reference {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var d struct {
		UID           string `json:"uid"`
		Title         string `json:"title"`
		SchemaVersion int    `json:"schemaVersion"`
		Templating    struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID      int    `json:"id"`
			Type    string `json:"type"`
			Title   string `json:"title"`
			GridPos struct {
				H, W, X, Y int
			} `json:"gridPos"`
			Datasource struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.True(t, json.Valid(b), "%s is not valid JSON", dashboardFile)
	require.NoError(t, json.Unmarshal(b, &d))
	require.NotEmpty(t, d.UID)
	require.NotEmpty(t, d.Title)
	require.Positive(t, d.SchemaVersion)
	vars := map[string]bool{}
	var refs []reference
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &q) != nil {
			json.Unmarshal(v.Query, &q.Query)
		}
		refs = append(refs, references(dashboardFile+" variable "+v.Name, q.Query)...)
	}
	require.True(t, vars["datasource"] && vars["job"], "the dashboard needs its datasource and job variables")
	ids := map[int]bool{}
	panels := 0
	for _, p := range d.Panels {
		where := fmt.Sprintf("%s panel %q", dashboardFile, p.Title)
		require.NotEmpty(t, p.Title, "%s: panel %d has no title", dashboardFile, p.ID)
		require.False(t, ids[p.ID], "%s: id %d used twice", where, p.ID)
		ids[p.ID] = true
		require.True(t, p.GridPos.W > 0 && p.GridPos.X+p.GridPos.W <= 24 && p.GridPos.H > 0, "%s: gridPos %+v", where, p.GridPos)
		if p.Type == "row" {
			continue
		}
		panels++
		require.Equal(t, "${datasource}", p.Datasource.UID, where)
		require.NotEmpty(t, p.Targets, where)
		for _, tg := range p.Targets {
			require.NotEmpty(t, tg.RefID, where)
			rr := references(where, tg.Expr)
			require.NotEmpty(t, rr, "%s: target %s reads no metric", where, tg.RefID)
			refs = append(refs, rr...)
		}
	}
	require.Positive(t, panels)
	return refs
}

// startNode opens one real node (raft over mutual TLS on loopback, so the
// certificate expiry metric exists; Pebble in a temp dir) behind the real
// HTTP handler, registering what `idem serve` registers, and waits until
// it leads and has applied its first entries. It returns the node's URL
// and its TLS files.
func startNode(t *testing.T) (string, *raftfsm.TLS) {
	t.Helper()
	dir := t.TempDir()
	ca, err := certgen.NewCA("contrib CA", 30*24*time.Hour)
	require.NoError(t, err)
	cert, err := certgen.NewCert(ca, certgen.CertRequest{CommonName: "n1", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Lifetime: 20 * 24 * time.Hour})
	require.NoError(t, err)
	require.NoError(t, ca.WriteFiles(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"), false))
	require.NoError(t, cert.WriteFiles(filepath.Join(dir, "n1.pem"), filepath.Join(dir, "n1-key.pem"), false))
	tl, err := raftfsm.LoadTLS(filepath.Join(dir, "n1.pem"), filepath.Join(dir, "n1-key.pem"), filepath.Join(dir, "ca.pem"), nil)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	// cmd/idem/serve.go registers these two beside the node's metrics.
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	rc := raftfsm.DefaultConfig()
	rc.DataDir = t.TempDir()
	rc.RaftAddr = "127.0.0.1:0"
	rc.Bootstrap = true
	rc.BucketWidth = time.Hour
	// No idle ticks or sweeps: only the test's requests enter the log, so
	// the apply lag read after them is exact.
	rc.TickInterval = time.Hour
	rc.SweepInterval = time.Hour
	rc.Registry = reg
	rc.TLS = tl
	srv := httptest.NewUnstartedServer(nil)
	rc.HTTPAdvertise = srv.Listener.Addr().String()
	node, err := raftfsm.Open(rc)
	require.NoError(t, err)
	as := api.New(node, api.Config{
		Retention: 24 * time.Hour, DefaultLease: 30 * time.Second, BucketWidth: rc.BucketWidth,
		Limits: api.DefaultLimits(), Gatherer: reg,
	})
	// as cmd/idem/serve.go does: the handler's, the listener's and the
	// TLS handshakes' metrics
	cl := api.Listen(srv.Listener, 64, nil)
	srv.Listener = cl
	srv.Config.ConnContext = cl.ConnContext
	reg.MustRegister(as.Collectors()...)
	reg.MustRegister(api.ListenerCollectors(cl, as)...)
	reg.MustRegister(api.HandshakeFailures())
	srv.Config.Handler = as
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		require.NoError(t, node.Close())
	})
	deadline := time.Now().Add(10 * time.Second)
	for !node.IsLeader() || !node.Ready() {
		require.True(t, time.Now().Before(deadline), "node did not become a ready leader within 10s")
		time.Sleep(10 * time.Millisecond)
	}
	// A linearizable read runs the term's Barrier: the FSM has then applied
	// everything before it, so the apply lag below is settled.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err = node.Lookup(ctx, engine.Scope{Principal: "p", Endpoint: "e", Key: "k"}, false, true)
	require.NoError(t, err)
	return srv.URL, tl
}

func post(t *testing.T, url, body string, want int) map[string]any {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, want, resp.StatusCode, "POST %s %s: %s", url, body, raw)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	return m
}

// TestOperatorFilesNameRealMetrics starts a node, drives every claim
// outcome the files watch so its labelled series exist, scrapes /metrics and
// checks that every metric and label value the alert rules and the
// dashboard read is there. It also checks the values of the metrics added
// for them (leader changes, apply lag, retention and bucket width).
func TestOperatorFilesNameRealMetrics(t *testing.T) {
	ruleRefs := loadRules(t)
	dashRefs := loadDashboard(t)
	testRefs := loadRuleTests(t)

	url, tl := startNode(t)
	claim := func(key, fp string) string {
		return fmt.Sprintf(`{"principal":"cus_1","endpoint":"POST /payments","key":%q,"fingerprint":%q}`, key, fp)
	}
	c := post(t, url+"/v1/claim", claim("k1", "aa"), http.StatusCreated)
	post(t, url+"/v1/complete", fmt.Sprintf(`{"principal":"cus_1","endpoint":"POST /payments","key":"k1","token":%q,
		"response":{"status":201,"body":"e30="}}`, c["token"]), http.StatusOK)
	post(t, url+"/v1/claim", claim("k1", "aa"), http.StatusOK)                  // replay
	post(t, url+"/v1/claim", claim("k1", "bb"), http.StatusUnprocessableEntity) // fingerprint mismatch
	post(t, url+"/v1/claim", claim("k2", "aa"), http.StatusCreated)             // claimed, left in progress
	post(t, url+"/v1/claim", claim("k2", "aa"), http.StatusConflict)            // conflict: in progress
	c = post(t, url+"/v1/claim", claim("k3", "aa"), http.StatusCreated)         // released below
	post(t, url+"/v1/release", fmt.Sprintf(`{"principal":"cus_1","endpoint":"POST /payments","key":"k3","token":%q}`, c["token"]), http.StatusOK)

	resp, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	s := parseExposition(t, string(body))

	s.check(t, ruleRefs)
	s.check(t, dashRefs)
	s.check(t, testRefs)

	// The outcomes driven above are counted under the label values the
	// files read.
	counts := map[string]float64{}
	for _, x := range s["idem_claims_total"] {
		counts[x.labels["outcome"]] = x.value
	}
	require.Equal(t, map[string]float64{"claimed": 3, "replay": 1, "in_progress": 1, "fingerprint_mismatch": 1, "quota_exceeded": 0, "principal_limit": 0}, counts)

	// The metrics added for the operator files measure what they say.
	require.Equal(t, 1.0, s.value(t, "idem_raft_leader_changes_total"), "one node: one leader learned since the start")
	require.Equal(t, 0.0, s.value(t, "idem_apply_lag_entries"), "a quiet leader has applied what it committed")
	require.Equal(t, 86400.0, s.value(t, "idem_max_retention_seconds"))
	require.Equal(t, 3600.0, s.value(t, "idem_bucket_width_seconds"))
	require.Equal(t, 3.0, s.value(t, "idem_records"))
	require.Equal(t, 1.0, s.value(t, "idem_in_progress"))
	expiry := map[string]float64{}
	for _, x := range s["idem_tls_cert_expiry_timestamp_seconds"] {
		expiry[x.labels["use"]] = x.value
	}
	cert := float64(tl.NotAfter().Unix())
	require.Equal(t, map[string]float64{"raft": cert, "http": cert, "ca": float64(tl.CANotAfter().Unix())}, expiry)
	require.InDelta(t, float64(time.Now().Add(20*24*time.Hour).Unix()), cert, 120)
}

// TestAlertRulesWithPromtool runs Prometheus's own checker and the rules'
// unit tests (every alert fires on the series that must raise it, none on a
// healthy cluster) when promtool is installed (apt-get install prometheus).
func TestAlertRulesWithPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (apt-get install prometheus); the Go checks above still ran")
	}
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTestFile}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

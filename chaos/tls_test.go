package chaos

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// --tls: the run's CA signs a certificate for each node's loopback IP and
// one for the harness; the nodes get their own files and the harness
// speaks HTTPS with the CA and its client certificate.
func TestTLSModeMakesCertificatesAndUsesThem(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	if err := MakeTLS(dir, 3); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "idem-ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	for _, id := range []string{"n1", "n2", "n3"} {
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, id+".pem"), filepath.Join(dir, id+"-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		ip := "127.0.0." + id[1:]
		if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: ip}); err != nil {
			t.Fatalf("%s's certificate does not verify for %s: %v", id, ip, err)
		}
	}
	c, err := NewCluster(ClusterConfig{Binary: "idem", Nodes: 3, Dir: t.TempDir(), HTTPPort: 1, RaftPort: 2, TLSDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	n2 := c.Node("n2")
	if !strings.HasPrefix(n2.Client.Addr(), "https://") {
		t.Fatalf("the harness must speak HTTPS to a TLS cluster, got %s", n2.Client.Addr())
	}
	args := c.args(n2)
	i := slices.Index(args, "--tls-cert-file")
	if i < 0 || args[i+1] != filepath.Join(dir, "n2.pem") || !slices.Contains(args, "--tls-ca-file") {
		t.Fatalf("n2 does not get its own TLS files: %v", args)
	}
}

// The run's certificates outlive the 30 days within which a node warns of
// one expiring (cmd/idem's expiryWarning): with a 24-hour CA every start
// of a --tls run warned twice, and those warnings stood as the last words
// of a node that ended, in place of why it ended.
func TestTLSRunCertificatesRaiseNoExpiryWarning(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	if err := MakeTLS(dir, 1); err != nil {
		t.Fatal(err)
	}
	const expiryWarning = 30 * 24 * time.Hour
	for _, f := range []string{"idem-ca.pem", "n1.pem"} {
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, f), filepath.Join(dir, strings.TrimSuffix(f, ".pem")+"-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		if left := time.Until(pair.Leaf.NotAfter); left < expiryWarning+24*time.Hour {
			t.Fatalf("%s expires in %s: a node warns within %s", f, left.Round(time.Hour), expiryWarning)
		}
	}
	// Nor do the warnings every start gives of the harness's own flags
	// say why a node ended.
	log := "=== chaos x: start idem serve --retention 15m0s\n" +
		`time=1 level=WARN msg="the bucket width 2h0m0s (--bucket-width's default) is wider than the retention 15m0s: expired records keep their disk space"` + "\n" +
		`time=2 level=INFO msg="shutting down: draining HTTP"` + "\n" +
		"=== chaos y: exited: <nil>\n"
	if got := lastWords(log); got != "exited: <nil>" {
		t.Fatalf("lastWords = %q", got)
	}
}

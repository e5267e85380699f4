package chaos

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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

package chaos

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/idem-store/idem/certgen"
	"github.com/idem-store/idem/client"
)

// With --tls a run makes its own CA in --out/tls, a node certificate for
// each node's loopback IP and a client certificate for the harness, and
// the nodes run with TLS everywhere: the nemeses then exercise the TLS
// transport (reconnects after kills, pauses and partitions) and the
// harness speaks HTTPS.

// CALifetime is the run's CA's, and so its certificates', lifetime: past
// the 30 days within which a node warns of a certificate or CA expiring
// soon. With 24 hours every node start of a --tls run logged both
// warnings, which then stood as the last words of any node that ended
// (lastWords), in place of why it ended.
const CALifetime = 90 * 24 * time.Hour

// MakeTLS writes the CA (idem-ca.pem), n1..nN (for 127.0.0.1..N) and the
// harness's client certificate (chaos.pem) into dir, replacing earlier ones.
func MakeTLS(dir string, nodes int) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("chaos: tls dir: %w", err)
	}
	ca, err := certgen.NewCA("idem chaos CA", CALifetime)
	if err != nil {
		return err
	}
	if err := ca.WriteFiles(filepath.Join(dir, "idem-ca.pem"), filepath.Join(dir, "idem-ca-key.pem"), true); err != nil {
		return err
	}
	reqs := []certgen.CertRequest{{CommonName: "chaos", Client: true}}
	for i := 1; i <= nodes; i++ {
		reqs = append(reqs, certgen.CertRequest{CommonName: fmt.Sprintf("n%d", i), IPs: []net.IP{net.IPv4(127, 0, 0, byte(i))}})
	}
	for _, r := range reqs {
		pair, err := certgen.NewCert(ca, r)
		if err != nil {
			return err
		}
		if err := pair.WriteFiles(filepath.Join(dir, r.CommonName+".pem"), filepath.Join(dir, r.CommonName+"-key.pem"), true); err != nil {
			return err
		}
	}
	return nil
}

// tlsArgs are node id's --tls-* flags.
func tlsArgs(dir, id string) []string {
	return []string{
		"--tls-cert-file", filepath.Join(dir, id+".pem"), "--tls-key-file", filepath.Join(dir, id+"-key.pem"),
		"--tls-ca-file", filepath.Join(dir, "idem-ca.pem"),
	}
}

// harnessTLS is the harness's TLS client configuration: the run's CA and
// its client certificate (the careless-membership nemesis joins nodes,
// which needs one).
func harnessTLS(dir string) (*tls.Config, error) {
	return client.LoadTLSConfig(filepath.Join(dir, "idem-ca.pem"), filepath.Join(dir, "chaos.pem"), filepath.Join(dir, "chaos-key.pem"))
}

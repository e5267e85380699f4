package raftfsm

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/idem-store/idem/certgen"
)

// expiryGauges gathers idem_tls_cert_expiry_timestamp_seconds by use.
func expiryGauges(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "idem_tls_cert_expiry_timestamp_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "use" {
					out[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}

// A TLS node exports when its certificate (raft and HTTPS) and its CA
// expire, and a reload shows the renewed certificate's expiry.
func TestTLSExpiryMetric(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t, "cluster CA")
	c, k, ca := pki.files(certgen.CertRequest{CommonName: "n1", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Lifetime: time.Hour})
	tl, err := LoadTLS(c, k, ca, nil)
	require.NoError(t, err)
	blk, _ := pem.Decode(pki.ca.Cert)
	caCert, err := x509.ParseCertificate(blk.Bytes)
	require.NoError(t, err)

	reg := prometheus.NewRegistry()
	mc := newMemCluster(t)
	n := mc.openTLS("n1", true, tl, func(cfg *Config) { cfg.Registry = reg })
	mc.leader(n)

	cert := float64(tl.NotAfter().Unix())
	require.Equal(t, map[string]float64{"raft": cert, "http": cert, "ca": float64(caCert.NotAfter.Unix())}, expiryGauges(t, reg))
	require.InDelta(t, float64(time.Now().Add(time.Hour).Unix()), cert, 120)

	pki.files(certgen.CertRequest{CommonName: "n1", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Lifetime: 5 * time.Hour})
	require.NoError(t, tl.Reload())
	got := expiryGauges(t, reg)
	require.InDelta(t, float64(time.Now().Add(5*time.Hour).Unix()), got["raft"], 120, "the renewed certificate's expiry is not exported")
	require.Equal(t, got["raft"], got["http"])
}

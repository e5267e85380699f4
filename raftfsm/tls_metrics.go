package raftfsm

import "github.com/prometheus/client_golang/prometheus"

// tlsExpiryDesc is the expiry of each certificate a TLS node depends on:
// the one it serves on the raft port and on HTTPS (the same file, so the
// same value under both uses) and the first of its CAs to expire. It is
// read at each scrape, so a reload shows at once.
var tlsExpiryDesc = prometheus.NewDesc("idem_tls_cert_expiry_timestamp_seconds",
	"When a certificate this node uses expires (not-after, Unix seconds): use=raft and use=http its own certificate (--tls-cert-file), use=ca the first of the CAs in --tls-ca-file to expire. Follows SIGHUP reloads.",
	[]string{"use"}, nil)

type tlsCollector struct{ t *TLS }

// TLSCollector exports the expiry of t's certificate and CAs as
// idem_tls_cert_expiry_timestamp_seconds{use="raft"|"http"|"ca"}.
func TLSCollector(t *TLS) prometheus.Collector { return tlsCollector{t} }

func (c tlsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- tlsExpiryDesc }

func (c tlsCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.t.cur.Load()
	cert, ca := float64(m.notAfter.Unix()), float64(m.caNotAfter.Unix())
	ch <- prometheus.MustNewConstMetric(tlsExpiryDesc, prometheus.GaugeValue, cert, "raft")
	ch <- prometheus.MustNewConstMetric(tlsExpiryDesc, prometheus.GaugeValue, cert, "http")
	ch <- prometheus.MustNewConstMetric(tlsExpiryDesc, prometheus.GaugeValue, ca, "ca")
}

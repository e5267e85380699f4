package api

import "github.com/prometheus/client_golang/prometheus"

// ListenerCollectors export what the connection and load limits see
// (Listen's cap, Limits.MaxInFlight, Limits.MaxInFlightBytes), so an operator can tell when they
// bite. `idem serve` registers them beside Collectors.
func ListenerCollectors(cl *ConnListener, s *Server) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "idem_http_connections_open",
			Help: "HTTP connections open now (--max-conns, plus the headroom kept for /healthz and /readyz)."},
			func() float64 { return float64(cl.Open()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "idem_http_connections_refused_total",
			Help: "HTTP connections answered 503 and closed at once: beyond --max-conns and the health headroom."},
			func() float64 { return float64(cl.Refused()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "idem_http_connections_evicted_total",
			Help: "HTTP connections closed for a newcomer while --max-conns was full: the oldest that held no request (no whole header since opened, or keep-alive idle for 1 s)."},
			func() float64 { return float64(cl.Evicted()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "idem_http_requests_in_flight",
			Help: "HTTP requests being handled now, /healthz and /readyz aside (--max-inflight)."},
			func() float64 { return float64(s.InFlight()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "idem_http_requests_refused_total",
			Help: "HTTP requests answered 503 for --max-inflight (with --auth-file, those past one app token's share of it included)."},
			func() float64 { return float64(s.RefusedInFlight()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "idem_http_request_body_bytes_in_use",
			Help: "Bytes of request bodies held now, each counted by its Content-Length (--max-request-bytes when chunked) from its headers to its answer (--max-inflight-bytes)."},
			func() float64 { return float64(s.BodyBytesInUse()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "idem_http_request_body_refused_total",
			Help: "HTTP requests answered 503 for --max-inflight-bytes: their bodies would have taken the node past it (with --auth-file, or their app token past its share of it)."},
			func() float64 { return float64(s.RefusedBodyBytes()) }),
	}
}

// HandshakeReasons are the reason label values of HandshakeFailures.
var HandshakeReasons = []string{"no_client_certificate", "client_certificate_refused", "client_refused_ours", "other"}

// HandshakeFailures is idem_http_tls_handshake_failures_total, each reason
// at zero from the start (an alert on a rate needs the series before the
// first failure). The server's error log counts into it: net/http reports a
// failed handshake only there.
func HandshakeFailures() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idem_http_tls_handshake_failures_total",
		Help: "TLS handshakes of the HTTP API (and --health-addr) that failed, by reason: no_client_certificate (--tls-client-auth require, a client without one), client_certificate_refused (not from a CA in --tls-ca-file, expired), client_refused_ours (the client does not trust this node's certificate), other (port scans, plain HTTP, timeouts)."},
		[]string{"reason"})
	for _, r := range HandshakeReasons {
		c.WithLabelValues(r)
	}
	return c
}

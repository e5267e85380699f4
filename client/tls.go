package client

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
)

// WithTLS makes the client speak HTTPS with cfg: its RootCAs verify the
// node's certificate (nil: the system's CAs), its Certificates are sent
// to a node that asks for a client certificate. An address given as
// host:port becomes https://host:port; one given with http:// is refused
// by New. It cannot be combined with WithHTTPClient (set TLS on that
// client's transport instead). LoadTLSConfig reads a cfg from PEM files.
// The Client speaks HTTP/1.1 over kept-alive TLS connections
// (NewTransport): cfg's NextProtos is not used, and its ServerName, when
// empty, is the address's host. A nil cfg is HTTPS with the system's CAs,
// as NewTransport takes nil, never plain HTTP.
func WithTLS(cfg *tls.Config) Option {
	return func(c *Client) {
		if cfg == nil {
			// A caller that asked for TLS gets it: a nil config (a
			// loader's error ignored) left the client on plain HTTP,
			// sending its bearer token in clear text.
			cfg = &tls.Config{}
		}
		c.tls = cfg
	}
}

// LoadTLSConfig reads what idem tls makes: the CA that signed the nodes'
// certificates (caFile, the nodes' --tls-ca-file), and, for nodes started
// with --tls-client-auth require (or to join a node), a client
// certificate and its key. Empty names are skipped; certFile and keyFile
// go together.
func LoadTLSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		b, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("client: --ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("client: --ca-file %s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case certFile != "" && keyFile == "":
		return nil, errors.New("client: --cert-file needs --key-file")
	case keyFile != "" && certFile == "":
		return nil, errors.New("client: --key-file needs --cert-file")
	case certFile != "":
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("client: --cert-file %s with --key-file %s: %w", certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// applyTLS settles the scheme once the options are known: explicit
// says whether addr carried a scheme.
func (c *Client) applyTLS(addr string, explicit bool) error {
	if c.tls == nil {
		return nil
	}
	if c.hc != nil {
		return fmt.Errorf("%w %q: WithTLS and WithHTTPClient exclude each other (set TLS on the http.Client's transport)", ErrAddress, addr)
	}
	u, err := parseAddr(addr)
	if err != nil {
		return err
	}
	for _, n := range c.nodes {
		if n.Host != u.Host || n.Path != u.Path {
			continue
		}
		switch {
		case !explicit:
			n.Scheme = "https"
		case n.Scheme != "https":
			return fmt.Errorf("%w %q: TLS settings given (client.WithTLS; --ca-file on the command line) for an http:// address: use https://, or leave out WithTLS for plain HTTP (WithTLS(nil) asks for HTTPS)", ErrAddress, addr)
		}
	}
	return nil
}

// plainToHTTPS turns Go's answer to plain HTTP sent to an HTTPS port into
// an error that says what to do, rather than a 400 without a code.
func plainToHTTPS(base *url.URL, status int, raw []byte) error {
	if base.Scheme == "http" && status == http.StatusBadRequest &&
		bytes.HasPrefix(raw, []byte("Client sent an HTTP request to an HTTPS server")) {
		return fmt.Errorf("%w %s: the node speaks HTTPS: use https:// and the CA of its certificate (--ca-file on the command line, client.WithTLS in Go)", ErrAddress, base)
	}
	return nil
}

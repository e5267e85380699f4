// Package certgen makes a development CA and node and client certificates
// (ECDSA P-256 PEM files) for `idem tls`, the chaos harness and tests. It
// imports the standard library only, so any package may use it.
package certgen

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// A development CA and node certificates, as `idem tls ca` and `idem tls
// cert` make them (and `idem chaos --tls` for its own clusters): ECDSA
// P-256, PEM files. A production cluster may as well use certificates from
// its own PKI: a node needs server and client use, with the IPs and names
// other nodes and clients dial as SANs.

// Default lifetimes, as Consul's `consul tls` uses them.
const (
	DefaultCALifetime   = 5 * 365 * 24 * time.Hour
	DefaultCertLifetime = 365 * 24 * time.Hour
)

// CertRequest describes a certificate to sign.
type CertRequest struct {
	// CommonName names the holder (a node id, an operator).
	CommonName string
	IPs        []net.IP
	DNSNames   []string
	// Client makes a certificate for client use only (an operator's CLI,
	// an application): it reaches an API that asks for client
	// certificates, never the raft port. Otherwise the certificate is a
	// node's, for server and client use.
	Client   bool
	Lifetime time.Duration
}

// PEMPair is a certificate and its private key, PEM-encoded.
type PEMPair struct{ Cert, Key []byte }

// NewCA makes a self-signed CA that can sign certificates but no other CA.
func NewCA(commonName string, lifetime time.Duration) (PEMPair, error) {
	if lifetime <= 0 {
		lifetime = DefaultCALifetime
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return PEMPair{}, fmt.Errorf("raftfsm: generate CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return PEMPair{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"idem"}},
		NotBefore:             now.Add(-time.Minute), // tolerate a little clock skew between machines
		NotAfter:              now.Add(lifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		SubjectKeyId:          keyID(&key.PublicKey),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return PEMPair{}, fmt.Errorf("raftfsm: sign CA: %w", err)
	}
	return encodePair(der, key)
}

// NewCert makes a certificate signed by the CA.
func NewCert(ca PEMPair, req CertRequest) (PEMPair, error) {
	caCert, caKey, err := parsePair(ca)
	if err != nil {
		return PEMPair{}, err
	}
	if !caCert.IsCA {
		return PEMPair{}, errors.New("raftfsm: the CA certificate is not a CA")
	}
	if !req.Client && len(req.IPs) == 0 && len(req.DNSNames) == 0 {
		return PEMPair{}, errors.New("raftfsm: a node certificate needs at least one IP or DNS name that others dial")
	}
	if req.Lifetime <= 0 {
		req.Lifetime = DefaultCertLifetime
	}
	now := time.Now()
	notAfter := now.Add(req.Lifetime)
	if notAfter.After(caCert.NotAfter) {
		notAfter = caCert.NotAfter // a certificate cannot outlive its CA's verification
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return PEMPair{}, fmt.Errorf("raftfsm: generate key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return PEMPair{}, err
	}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	if req.Client {
		usage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	tmpl := &x509.Certificate{
		SerialNumber:   serial,
		Subject:        pkix.Name{CommonName: req.CommonName, Organization: []string{"idem"}},
		NotBefore:      now.Add(-time.Minute),
		NotAfter:       notAfter,
		KeyUsage:       x509.KeyUsageDigitalSignature,
		ExtKeyUsage:    usage,
		IPAddresses:    req.IPs,
		DNSNames:       req.DNSNames,
		SubjectKeyId:   keyID(&key.PublicKey),
		AuthorityKeyId: caCert.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return PEMPair{}, fmt.Errorf("raftfsm: sign certificate: %w", err)
	}
	return encodePair(der, key)
}

// WriteFiles writes the certificate and key, each mode 0600, refusing to
// replace an existing file unless force: a CA key overwritten by mistake
// cannot sign for the cluster any more.
func (p PEMPair) WriteFiles(certFile, keyFile string, force bool) error {
	if !force {
		for _, f := range []string{certFile, keyFile} {
			if _, err := os.Lstat(f); err == nil {
				return fmt.Errorf("raftfsm: %s exists (pass --force to replace it)", f)
			}
		}
	}
	for _, w := range []struct {
		path string
		b    []byte
	}{{keyFile, p.Key}, {certFile, p.Cert}} {
		if err := writeFile0600(w.path, w.b); err != nil {
			return err
		}
	}
	return nil
}

// writeFile0600 replaces path atomically (a node reloading on SIGHUP
// never reads half a file) with mode 0600.
func writeFile0600(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("raftfsm: write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("raftfsm: write %s: %w", path, err)
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("raftfsm: write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("raftfsm: write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("raftfsm: write %s: %w", path, err)
	}
	return nil
}

// ReadPEMPair reads a certificate and key written by WriteFiles (or any PEM
// pair with an ECDSA key).
func ReadPEMPair(certFile, keyFile string) (PEMPair, error) {
	c, err := os.ReadFile(certFile)
	if err != nil {
		return PEMPair{}, fmt.Errorf("raftfsm: %w", err)
	}
	k, err := os.ReadFile(keyFile)
	if err != nil {
		return PEMPair{}, fmt.Errorf("raftfsm: %w", err)
	}
	p := PEMPair{Cert: c, Key: k}
	if _, _, err := parsePair(p); err != nil {
		return PEMPair{}, fmt.Errorf("%w (%s, %s)", err, certFile, keyFile)
	}
	return p, nil
}

func parsePair(p PEMPair) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, _ := pem.Decode(p.Cert)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, nil, errors.New("raftfsm: no PEM certificate")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("raftfsm: certificate: %w", err)
	}
	kb, _ := pem.Decode(p.Key)
	if kb == nil {
		return nil, nil, errors.New("raftfsm: no PEM private key")
	}
	var key any
	switch kb.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(kb.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(kb.Bytes)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("raftfsm: private key: %w", err)
	}
	ec, ok := key.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, errors.New("raftfsm: private key is not ECDSA")
	}
	if !ec.PublicKey.Equal(cert.PublicKey) {
		return nil, nil, errors.New("raftfsm: private key does not match the certificate")
	}
	return cert, ec, nil
}

func encodePair(der []byte, key *ecdsa.PrivateKey) (PEMPair, error) {
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return PEMPair{}, fmt.Errorf("raftfsm: encode key: %w", err)
	}
	return PEMPair{
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}),
	}, nil
}

func newSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("raftfsm: serial number: %w", err)
	}
	return s, nil
}

func keyID(pub *ecdsa.PublicKey) []byte {
	b, _ := x509.MarshalPKIXPublicKey(pub)
	h := sha1.Sum(b) // RFC 5280's method 1; an identifier, not a security check
	return h[:]
}

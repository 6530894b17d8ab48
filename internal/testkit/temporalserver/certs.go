package temporalserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority made for one test run: it signs the
// server's certificate and the client certificates the server accepts.
type CA struct {
	// CertFile holds the CA certificate (PEM): clients verify the server
	// with it and the server verifies client certificates with it.
	CertFile string
	dir      string
	cert     *x509.Certificate
	key      *ecdsa.PrivateKey
}

// KeyPair names a certificate and its private key, both PEM files.
type KeyPair struct {
	CertFile, KeyFile string
}

// certLifetime outlives any test run; the certificates are thrown away
// with the temp dir.
const certLifetime = 24 * time.Hour

// NewCA creates a CA called name whose files go in dir.
func NewCA(dir, name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("CA %s: key: %w", name, err)
	}
	tmpl, err := template(name)
	if err != nil {
		return nil, err
	}
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("CA %s: sign: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("CA %s: parse: %w", name, err)
	}
	ca := &CA{CertFile: filepath.Join(dir, name+".pem"), dir: dir, cert: cert, key: key}
	if err := writePEM(ca.CertFile, "CERTIFICATE", der); err != nil {
		return nil, err
	}
	return ca, nil
}

// IssueServer signs a certificate for a server listening on 127.0.0.1 or
// localhost. It may also act as a client (the server's own system workers
// present it to the frontend).
func (ca *CA) IssueServer(name string) (KeyPair, error) {
	return ca.issue(name, func(t *x509.Certificate) {
		t.DNSNames = []string{"localhost"}
		t.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		t.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	})
}

// IssueClient signs a client certificate with common name name.
func (ca *CA) IssueClient(name string) (KeyPair, error) {
	return ca.issue(name, func(t *x509.Certificate) {
		t.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	})
}

func (ca *CA) issue(name string, shape func(*x509.Certificate)) (KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return KeyPair{}, fmt.Errorf("certificate %s: key: %w", name, err)
	}
	tmpl, err := template(name)
	if err != nil {
		return KeyPair{}, err
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	shape(tmpl)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("certificate %s: sign: %w", name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("certificate %s: key: %w", name, err)
	}
	kp := KeyPair{CertFile: filepath.Join(ca.dir, name+".pem"), KeyFile: filepath.Join(ca.dir, name+".key")}
	if err := writePEM(kp.CertFile, "CERTIFICATE", der); err != nil {
		return KeyPair{}, err
	}
	if err := writePEM(kp.KeyFile, "PRIVATE KEY", keyDER); err != nil {
		return KeyPair{}, err
	}
	return kp, nil
}

func template(name string) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("certificate %s: serial: %w", name, err)
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name, Organization: []string{"taskport tests"}},
		// Back-dated a little so a clock step between processes does not
		// make a fresh certificate "not yet valid".
		NotBefore: now.Add(-time.Hour),
		NotAfter:  now.Add(certLifetime),
	}, nil
}

func writePEM(path, blockType string, der []byte) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

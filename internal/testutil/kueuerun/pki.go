package kueuerun

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"time"
)

// PKI is a CA and a serving certificate it signed, PEM-encoded, in the shape Kueue's certificate
// rotator (open-policy-agent/cert-controller) keeps in its Secret: RSA keys in PKCS #1, the CA
// valid for the name "kueue-ca".
type PKI struct {
	CAPEM, CAKeyPEM, CertPEM, KeyPEM []byte
}

// NewPKI makes a CA and a serving certificate for dnsName and 127.0.0.1. Both outlive the
// rotator's 90-day look-ahead, so it keeps them rather than making its own.
func NewPKI(dnsName string) (*PKI, error) {
	now := time.Now().Add(-time.Hour)
	caKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kueue-ca", Organization: []string{"kueue"}},
		DNSNames:              []string{"kueue-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: dnsName},
		DNSNames:     []string{dnsName},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    now,
		NotAfter:     now.Add(2 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	enc := func(typ string, b []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}) }
	return &PKI{
		CAPEM:    enc("CERTIFICATE", caDER),
		CAKeyPEM: enc("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(caKey)),
		CertPEM:  enc("CERTIFICATE", der),
		KeyPEM:   enc("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key)),
	}, nil
}

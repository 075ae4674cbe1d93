// Command certs writes what one test control plane needs into a directory: a CA
// (ca.crt, ca.key), a serving certificate for 127.0.0.1 and localhost signed by it
// (serving.crt, serving.key) and a ServiceAccount signing key pair (sa.key, sa.pub).
// Every key is a fresh ECDSA P-256 key; nothing is reused between runs.
package main

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

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: certs DIR")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "certs:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTemplate := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "volmig-test-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	servingKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	servingTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	servingDER, err := x509.CreateCertificate(rand.Reader, servingTemplate, caCert, &servingKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	files := []struct {
		name, kind string
		der        []byte
	}{
		{"ca.crt", "CERTIFICATE", caDER},
		{"serving.crt", "CERTIFICATE", servingDER},
		{"sa.pub", "PUBLIC KEY", saPub},
	}
	for _, k := range []struct {
		name string
		key  *ecdsa.PrivateKey
	}{{"ca.key", caKey}, {"serving.key", servingKey}, {"sa.key", saKey}} {
		der, err := x509.MarshalECPrivateKey(k.key)
		if err != nil {
			return err
		}
		files = append(files, struct {
			name, kind string
			der        []byte
		}{k.name, "EC PRIVATE KEY", der})
	}
	for _, f := range files {
		data := pem.EncodeToMemory(&pem.Block{Type: f.kind, Bytes: f.der})
		if err := os.WriteFile(filepath.Join(dir, f.name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

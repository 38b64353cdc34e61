// Command certgen writes the certificates and keys of a test control plane into a directory:
//
//	ca.crt ca.key               the cluster CA (clients, serving certificates, CSR signing)
//	apiserver.crt apiserver.key kube-apiserver's serving certificate
//	kubelet.crt kubelet.key     kwok's kubelet-API serving certificate
//	admin.crt admin.key         a client certificate in system:masters
//	sa.key sa.pub               the service-account token signing key pair
//
// Keys are ECDSA P-256: generating them takes milliseconds.
package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	dir := flag.String("dir", "", "directory to write into")
	ips := flag.String("ips", "127.0.0.1", "comma-separated IP SANs of the serving certificates")
	dns := flag.String("dns", "localhost", "comma-separated DNS SANs of the serving certificates")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "certgen: -dir is required")
		os.Exit(2)
	}
	if err := run(*dir, split(*ips), split(*dns)); err != nil {
		fmt.Fprintln(os.Stderr, "certgen:", err)
		os.Exit(1)
	}
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func run(dir string, ipSANs, dnsSANs []string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	var ips []net.IP
	for _, s := range ipSANs {
		ip := net.ParseIP(s)
		if ip == nil {
			return fmt.Errorf("bad IP %q", s)
		}
		ips = append(ips, ip)
	}
	now := time.Now()
	caKey, err := newKey()
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "surreal-kube-test-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := sign(caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	if err := writePair(dir, "ca", caDER, caKey); err != nil {
		return err
	}
	leaves := []struct {
		name    string
		subject pkix.Name
		usage   x509.ExtKeyUsage
		serving bool
	}{
		{"apiserver", pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth, true},
		{"kubelet", pkix.Name{CommonName: "kwok-kubelet"}, x509.ExtKeyUsageServerAuth, true},
		{"admin", pkix.Name{CommonName: "kubernetes-admin", Organization: []string{"system:masters"}}, x509.ExtKeyUsageClientAuth, false},
	}
	for _, l := range leaves {
		key, err := newKey()
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			Subject:     l.subject,
			NotBefore:   now.Add(-time.Hour),
			NotAfter:    now.Add(365 * 24 * time.Hour),
			KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage: []x509.ExtKeyUsage{l.usage},
		}
		if l.serving {
			tmpl.IPAddresses = ips
			tmpl.DNSNames = dnsSANs
		}
		der, err := sign(tmpl, ca, key.Public(), caKey)
		if err != nil {
			return err
		}
		if err := writePair(dir, l.name, der, key); err != nil {
			return err
		}
	}
	saKey, err := newKey()
	if err != nil {
		return err
	}
	saPub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return err
	}
	if err := writeKey(filepath.Join(dir, "sa.key"), saKey); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, "sa.pub"), "PUBLIC KEY", saPub)
}

func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func sign(tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	return x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
}

func writePair(dir, name string, der []byte, key *ecdsa.PrivateKey) error {
	if err := writePEM(filepath.Join(dir, name+".crt"), "CERTIFICATE", der); err != nil {
		return err
	}
	return writeKey(filepath.Join(dir, name+".key"), key)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der)
}

func writePEM(path, kind string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
}

package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
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

// certSpec describes one leaf certificate the control plane needs.
type certSpec struct {
	name   string // file stem under pki/
	cn     string
	orgs   []string
	usages []x509.ExtKeyUsage
	dns    []string
	ips    []net.IP
	// etcd: signed by the etcd CA. etcd trusts only that CA, so no certificate
	// the cluster CA issues (admins', nodes' through CSRs) opens etcd.
	etcd bool
}

// authority is a CA certificate and its signing key.
type authority struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// pki is the cluster's certificate authorities and the leaves signed by them.
type pki struct {
	dir    string
	ca     authority
	etcdCA authority
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

// ensurePKI loads the CA from dir or creates it, then creates every missing
// leaf. Existing files are kept so kubeconfigs and issued node certificates
// stay valid across restarts of the same state directory.
func ensurePKI(dir string, leaves []certSpec) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{dir: dir}
	var err error
	if p.ca, err = p.ensureCA("ca", "vkvm-cluster-ca"); err != nil {
		return nil, fmt.Errorf("cluster CA: %w", err)
	}
	// A state dir from before etcd used TLS has no etcd CA yet: it is created here.
	if p.etcdCA, err = p.ensureCA("etcd-ca", "vkvm-etcd-ca"); err != nil {
		return nil, fmt.Errorf("etcd CA: %w", err)
	}
	for _, leaf := range leaves {
		if err := p.ensureLeaf(leaf); err != nil {
			return nil, fmt.Errorf("certificate %s: %w", leaf.name, err)
		}
	}
	if err := p.ensureServiceAccountKey(); err != nil {
		return nil, fmt.Errorf("service-account key: %w", err)
	}
	return p, nil
}

func (p *pki) ensureCA(stem, cn string) (authority, error) {
	certPath, keyPath := p.path(stem+".crt"), p.path(stem+".key")
	if exists(certPath) && exists(keyPath) {
		cert, key, err := loadPair(certPath, keyPath)
		return authority{cert, key}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return authority{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return authority{}, err
	}
	cert, _ := x509.ParseCertificate(der)
	return authority{cert, key}, writePair(certPath, keyPath, der, key)
}

func (p *pki) ensureLeaf(s certSpec) error {
	certPath, keyPath := p.path(s.name+".crt"), p.path(s.name+".key")
	if exists(certPath) && exists(keyPath) {
		cert, _, err := loadPair(certPath, keyPath)
		if err != nil {
			return err
		}
		// Reissued when the names changed (another --bind-address), or clients would reject it.
		if sameNames(cert, s) {
			return nil
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: s.cn, Organization: s.orgs},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  s.usages,
		DNSNames:     s.dns,
		IPAddresses:  s.ips,
	}
	ca := p.ca
	if s.etcd {
		ca = p.etcdCA
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return err
	}
	return writePair(certPath, keyPath, der, key)
}

// ensureServiceAccountKey writes the RSA key pair that signs and verifies
// service-account tokens (RSA because every token consumer supports RS256).
func (p *pki) ensureServiceAccountKey() error {
	keyPath, pubPath := p.path("sa.key"), p.path("sa.pub")
	if exists(keyPath) && exists(pubPath) {
		return nil
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := writePEM(keyPath, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key), 0o600); err != nil {
		return err
	}
	return writePEM(pubPath, "PUBLIC KEY", pub, 0o600)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(err)
	}
	return n
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func writePair(certPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(keyPath, "EC PRIVATE KEY", keyDER, 0o600); err != nil {
		return err
	}
	// Only root reads the control plane's files: certificates too (0600, as keys).
	return writePEM(certPath, "CERTIFICATE", der, 0o600)
}

// writePEM writes atomically so a crash never leaves a truncated key behind.
func writePEM(path, blockType string, der []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	data := pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der})
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func loadPair(certPath, keyPath string) (*x509.Certificate, crypto.Signer, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New("not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

// sameNames reports whether cert carries exactly the DNS names and IPs of s.
func sameNames(cert *x509.Certificate, s certSpec) bool {
	if len(cert.DNSNames) != len(s.dns) || len(cert.IPAddresses) != len(s.ips) {
		return false
	}
	for i, name := range s.dns {
		if cert.DNSNames[i] != name {
			return false
		}
	}
	for i, ip := range s.ips {
		if !cert.IPAddresses[i].Equal(ip) {
			return false
		}
	}
	return true
}

// ensureFrontProxyPKI keeps a second CA in dir and the aggregator's client
// certificate (CN front-proxy-client, the name --requestheader-allowed-names
// admits) signed by it.
func ensureFrontProxyPKI(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	p := &pki{dir: dir}
	var err error
	if p.ca, err = p.ensureCA("ca", "vkvm-front-proxy-ca"); err != nil {
		return err
	}
	return p.ensureLeaf(certSpec{name: "front-proxy-client", cn: "front-proxy-client", usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
}

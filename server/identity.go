package server

import "crypto/tls"

// Identity returns a client's identity from its verified certificate: the
// first URI SAN, else the first DNS SAN, else the subject common name. It
// is empty when the client presented no certificate.
func Identity(cs tls.ConnectionState) string {
	if len(cs.PeerCertificates) == 0 {
		return ""
	}
	cert := cs.PeerCertificates[0]
	switch {
	case len(cert.URIs) > 0:
		return cert.URIs[0].String()
	case len(cert.DNSNames) > 0:
		return cert.DNSNames[0]
	}
	return cert.Subject.CommonName
}

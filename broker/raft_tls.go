package broker

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
)

// The metadata quorum's Raft transport (RaftAddr) carries Raft's RPCs and the
// proposals followers forward to the leader: whoever reaches it can vote and
// write the cluster's metadata. With RaftTLS it takes mutual TLS only: a
// voter presents the broker certificate (ssl-cert-file), and accepts a peer
// whose certificate ssl-ca-file signed; with the authorizer on, that peer's
// principal (its subject through ssl-principal-mapping-rules) must also be a
// super user, as Kafka's controllers are. Super users, not CLUSTER_ACTION
// ACLs: the ACLs are themselves in the metadata, which a voter that is
// behind (or new) has not read yet.

// checkRaftTLS validates the settings RaftTLS needs (called by checkSecurity).
func (c *Config) checkRaftTLS() error {
	if !c.RaftTLS {
		return nil
	}
	if c.TLS == nil || (len(c.TLS.Certificates) == 0 && c.TLS.GetCertificate == nil) {
		return errors.New("broker: raft-security-protocol SSL needs the broker certificate (ssl-cert-file, ssl-key-file)")
	}
	if c.TLS.ClientCAs == nil {
		// Without it Go would verify peers against the system's roots:
		// any publicly issued certificate would be a voter.
		return errors.New("broker: raft-security-protocol SSL needs ssl-ca-file, the CA that signs the brokers' certificates")
	}
	if c.PeerTLS == nil || (len(c.PeerTLS.Certificates) == 0 && c.PeerTLS.GetClientCertificate == nil) || c.PeerTLS.RootCAs == nil {
		return errors.New("broker: raft-security-protocol SSL needs the broker certificate and ssl-ca-file for dialing peers")
	}
	return nil
}

// raftServerTLS is the metadata transport's server side: the broker's
// certificate, a client certificate required and verified against
// ssl-ca-file, and with the authorizer the peer's principal a super user.
func (b *Broker) raftServerTLS() *tls.Config {
	cfg := b.cfg.TLS.Clone()
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	cfg.GetConfigForClient = nil
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("no client certificate")
		}
		if b.authz == nil {
			return nil
		}
		name, err := b.cfg.SSLPrincipalMapper.Map(subjectName(cs.PeerCertificates[0]))
		if err != nil {
			return err
		}
		if principal := "User:" + name; !b.authz.super[principal] {
			return fmt.Errorf("%s is not a super user: the metadata quorum takes only super users' certificates while the authorizer is on", principal)
		}
		return nil
	}
	return cfg
}

// raftClientTLS wraps a connection dialed to the voter at addr (its address
// in the voter set) in TLS: the broker's certificate presented, the peer's
// verified against ssl-ca-file and addr's host. The handshake runs on the
// first write, under the transport's dial deadline.
func (b *Broker) raftClientTLS(nc net.Conn, addr string) net.Conn {
	cfg := b.cfg.PeerTLS.Clone()
	if cfg.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		}
	}
	return tls.Client(nc, cfg)
}

// SkipPeerHostnameCheck makes cfg, a configuration for dialing peers, verify
// the peer's certificate chain against cfg.RootCAs (the system's roots when
// nil) without matching its names to the address dialed: Kafka's
// ssl.endpoint.identification.algorithm set empty. For certificates that
// name no address the brokers dial (pods whose IPs are not known when the
// certificate is issued); the CA must then sign only brokers' certificates.
func SkipPeerHostnameCheck(cfg *tls.Config) {
	roots := cfg.RootCAs
	cfg.InsecureSkipVerify = true // the chain is verified below, only not the name
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("tls: the peer sent no certificate")
		}
		opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(opts)
		return err
	}
}

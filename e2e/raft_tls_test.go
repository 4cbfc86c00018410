package e2e

import (
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// TestRaftTLSCluster: three broker processes whose metadata quorum runs over
// mutual TLS (--raft-security-protocol SSL with the broker certificate and
// the CA file) form the quorum, replicate acks=all writes, and take a voter
// killed with SIGKILL back; every acknowledged record is on every replica.
// Their Raft ports refuse a plaintext connection.
func TestRaftTLSCluster(t *testing.T) {
	t.Parallel() // see TestMain
	ca, cert, key := writeTestCA(t, t.TempDir())
	c := StartCluster(t, 3, "--raft-security-protocol", "SSL", "--ssl-cert-file", cert, "--ssl-key-file", key, "--ssl-ca-file", ca)
	adm := kadm.NewClient(c.Client(t))
	const topic = "raft-tls"
	createClusterTopic(t, adm, topic, 3, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("2")})
	c.WaitFullISR(t, adm, topic, 60*time.Second)
	kp := startKeyedProducer(t, c, topic)
	defer kp.stop()
	waitFor(t, 60*time.Second, "acknowledged writes", func() bool { return kp.count() > 300 })

	// A plaintext client on a Raft port: its bytes are no TLS handshake, so
	// the connection is closed before anything is read as a request.
	nc, err := net.DialTimeout("tcp", c.Brokers[2].RaftAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	req := binary.BigEndian.AppendUint32([]byte{'F', 0, 0, 0, 5, 4}, 5000) // a forwarded read-index request
	if _, err := nc.Write(req); err != nil {
		t.Fatal(err)
	}
	if n, err := io.ReadFull(nc, make([]byte, 4)); err == nil {
		t.Errorf("a plaintext connection to the Raft port was answered (%d bytes)", n)
	}
	nc.Close()
	waitFor(t, 30*time.Second, "the refusal in the broker's log", func() bool {
		return strings.Contains(c.Brokers[2].Log(), "TLS handshake refused")
	})

	// A voter killed and restarted rejoins over TLS and catches up.
	c.Brokers[0].Restart(false)
	base := kp.count()
	waitFor(t, 60*time.Second, "writes acknowledged after the restart", func() bool { return kp.count() > base+300 })
	kp.stop()
	c.WaitFullISR(t, adm, topic, 60*time.Second)
	c.WaitIdenticalReplicas(t, topic, 3, 60*time.Second)
	checkAcked(t, c, topic, kp)
}

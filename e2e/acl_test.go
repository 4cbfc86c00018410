package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// authorizerArgs turn the authorizer on with the PLAINTEXT listener's
// anonymous principal as the super user: the first listener carries the
// inter-broker traffic (and the harness's readiness probe, and the
// sediment CLI of these tests), so its principal needs CLUSTER_ACTION.
var authorizerArgs = []string{"--authorizer-enabled", "--super-users", "User:ANONYMOUS"}

// hasAuthzError reports whether kcat's stderr tells of an authorization
// failure (librdkafka: "Broker: Topic authorization failed").
func hasAuthzError(stderr string) bool {
	return strings.Contains(strings.ToLower(stderr), "authoriz")
}

// kcatTopics is the set of topic names a `kcat -L` listing shows.
func kcatTopics(listing string) map[string]bool {
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+topic "([^"]*)"`).FindAllStringSubmatch(listing, -1) {
		out[m[1]] = true
	}
	return out
}

// firstLine is s up to its first newline.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// endOffset is partition 0's log end offset of topic, asked over adm.
func endOffset(t testing.TB, adm *kadm.Client, topic string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("ListEndOffsets %s: %v", topic, err)
	}
	r, ok := o.Lookup(topic, 0)
	if !ok || r.Err != nil {
		t.Fatalf("ListEndOffsets %s: %v (found %v)", topic, r.Err, ok)
	}
	return r.Offset
}

// TestACLKcat runs one broker process with the authorizer on: a PLAINTEXT
// listener first (User:ANONYMOUS, the super user; the sediment CLI goes
// there) and a SASL_PLAINTEXT one, where kcat (librdkafka) logs in as the
// SCRAM user alice. Without ACLs alice sees no topic and cannot produce
// (TOPIC_AUTHORIZATION_FAILED, nothing appended); `sediment acl create
// --producer` and `--consumer` let her produce keyed records and read them
// back in a consumer group (kcat -G, which commits the group's offsets);
// `kcat -L` shows her the topic she may describe and not the other one;
// `sediment acl delete --producer --force` takes writing away again while
// reading stays, and deleting the consumer ACLs hides the topic.
func TestACLKcat(t *testing.T) {
	t.Parallel() // see TestMain
	saslPlain := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	b := StartBroker(t, BrokerOptions{
		Listeners: "SASL_PLAINTEXT://" + saslPlain,
		ExtraArgs: authorizerArgs,
	})
	adm := b.Admin(t) // PLAINTEXT: the super user
	b.sediment(t, "alice-pw\n", "user", "set", "alice", "--password-stdin")
	b.sediment(t, "", "topic", "create", "t", "--partitions", "1")
	b.sediment(t, "", "topic", "create", "hidden", "--partitions", "1")

	alice := []string{"-b", saslPlain, "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=SCRAM-SHA-256",
		"-X", "sasl.username=alice", "-X", "sasl.password=alice-pw"}
	kcat := func(stdin string, args ...string) cmdResult {
		t.Helper()
		return run(t, stdin, nil, kcatPath(t), append(append([]string{}, alice...), args...)...)
	}
	lines := keyedLines(200)
	input := strings.Join(lines, "\n") + "\n"
	// A refused produce fails its messages at once; the timeout only
	// bounds a broker that would not answer.
	produce := func() cmdResult {
		t.Helper()
		return kcat(input, "-P", "-t", "t", "-K:", "-X", "message.timeout.ms=20000")
	}
	list := func() map[string]bool {
		t.Helper()
		r := kcat("", "-L")
		if r.Err != nil {
			t.Fatalf("kcat -L as alice: %v\n%s\n%s", r.Err, r.Stdout, r.Stderr)
		}
		return kcatTopics(r.Stdout)
	}

	// No ACL: alice logs in (kcat -L works) but sees no topic, and her
	// produce is refused with nothing appended.
	if got := list(); got["t"] || got["hidden"] {
		t.Fatalf("kcat -L as alice without ACLs lists %v; want neither t nor hidden", got)
	}
	if r := produce(); r.Err == nil || !hasAuthzError(r.Stderr) {
		t.Fatalf("kcat -P as alice without ACLs: err %v (want a failure), stderr:\n%s", r.Err, r.Stderr)
	} else {
		t.Logf("kcat -P as alice without ACLs: %v, stderr starts %q", r.Err, firstLine(r.Stderr))
	}
	if end := endOffset(t, adm, "t"); end != 0 {
		t.Fatalf("a refused produce appended: t ends at %d", end)
	}

	// The ACLs, through the PLAINTEXT listener as the super user.
	out := b.sediment(t, "", "acl", "create", "--allow-principal", "User:alice", "--producer", "--topic", "t").Stdout
	if !strings.Contains(out, "Added ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`") ||
		!strings.Contains(out, "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)") {
		t.Fatalf("sediment acl create --producer printed:\n%s", out)
	}
	b.sediment(t, "", "acl", "create", "--allow-principal", "User:alice", "--consumer", "--topic", "t", "--group", "g")
	listed := b.sediment(t, "", "acl", "list", "--principal", "User:alice").Stdout
	for _, want := range []string{
		"Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`:\n" +
			"\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n" +
			"\t(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)\n" +
			"\t(principal=User:alice, host=*, operation=CREATE, permissionType=ALLOW)\n" +
			"\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)\n",
		"Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=g, patternType=LITERAL)`:\n" +
			"\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n",
	} {
		if !strings.Contains(listed, want) {
			t.Errorf("sediment acl list --principal User:alice: no\n%s\nin\n%s", want, listed)
		}
	}

	// Alice produces and reads back in group g.
	if r := produce(); r.Err != nil {
		t.Fatalf("kcat -P as alice with --producer ACLs: %v\n%s", r.Err, r.Stderr)
	}
	if end := endOffset(t, adm, "t"); end != int64(len(lines)) {
		t.Fatalf("t ends at %d after alice's produce, want %d", end, len(lines))
	}
	r := kcat("", "-G", "g", "-X", "auto.offset.reset=earliest", "-e", "-q", "-f", `%k:%s\n`, "t")
	if r.Err != nil {
		t.Fatalf("kcat -G g as alice: %v\n%s", r.Err, r.Stderr)
	}
	if r.Stdout != input {
		t.Fatalf("kcat -G g as alice read something else than she produced:\n%s", diffLines(input, r.Stdout))
	}
	// kcat commits the group's position as it leaves (OffsetCommit: READ
	// on the group and the topic).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	offs, err := adm.FetchOffsets(ctx, "g")
	if err != nil {
		t.Fatalf("OffsetFetch g: %v", err)
	}
	if o, ok := offs.Lookup("t", 0); !ok || o.Err != nil || o.At != int64(len(lines)) {
		t.Fatalf("group g's committed offset on t-0: %+v (found %v), want %d", o, ok, len(lines))
	}

	// kcat -L: t, which alice may describe, and not hidden.
	if got := list(); !got["t"] || got["hidden"] {
		t.Fatalf("kcat -L as alice lists %v; want t and not hidden", got)
	}

	// Without the producer ACLs writing is refused again; reading is not.
	out = b.sediment(t, "", "acl", "delete", "--allow-principal", "User:alice", "--producer", "--topic", "t", "--force").Stdout
	if !strings.Contains(out, "Removed ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`") ||
		!strings.Contains(out, "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)") {
		t.Fatalf("sediment acl delete --producer --force printed:\n%s", out)
	}
	if r := produce(); r.Err == nil || !hasAuthzError(r.Stderr) {
		t.Fatalf("kcat -P as alice after the producer ACLs were deleted: err %v (want a failure), stderr:\n%s", r.Err, r.Stderr)
	}
	if end := endOffset(t, adm, "t"); end != int64(len(lines)) {
		t.Fatalf("a refused produce appended: t ends at %d, want %d", end, len(lines))
	}
	r = kcat("", "-C", "-t", "t", "-o", "beginning", "-e", "-q", "-f", `%k:%s\n`)
	if r.Err != nil || r.Stdout != input {
		t.Fatalf("kcat -C as alice with only the consumer ACLs left: %v\n%s\n%s", r.Err, diffLines(input, r.Stdout), r.Stderr)
	}

	// Without the consumer ACLs too, t is hidden from alice again.
	b.sediment(t, "", "acl", "delete", "--allow-principal", "User:alice", "--consumer", "--topic", "t", "--group", "g", "--force")
	if listed := b.sediment(t, "", "acl", "list", "--principal", "User:alice").Stdout; strings.TrimSpace(listed) != "" {
		t.Fatalf("alice's ACLs after both deletes:\n%s", listed)
	}
	if got := list(); got["t"] || got["hidden"] {
		t.Fatalf("kcat -L as alice after her ACLs were deleted lists %v; want neither t nor hidden", got)
	}
}

// saslClient is a franz-go client logging in as user (SCRAM-SHA-256) on the
// given SASL_PLAINTEXT addresses, closed at cleanup.
func saslClient(t testing.TB, user string, seeds []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	mech := scram.Auth{User: user, Pass: user + "-pw"}.AsSha256Mechanism()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.SASL(mech)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// TestACLCluster: three broker processes with the authorizer on, each with
// a PLAINTEXT listener first (the inter-broker one; User:ANONYMOUS is the
// super user) and a SASL_PLAINTEXT one. A SCRAM user with --producer ACLs
// writes to a topic of replication factor 3 with min.insync.replicas=2
// with acks=all through the SASL listeners and gets every record
// acknowledged, so the followers' replica fetches pass the authorizer; a
// user with --consumer ACLs reads every record from a follower (KIP-392,
// the brokers in racks). The producing user, who has no CLUSTER_ACTION,
// sending a replica Fetch (ReplicaID 1; ReplicaState from v15) gets
// CLUSTER_AUTHORIZATION_FAILED, both at the newest Fetch version and at
// v12 (the replica id a field of its own).
func TestACLCluster(t *testing.T) {
	t.Parallel() // see TestMain
	c := NewCluster(t, 3, authorizerArgs...)
	sasl := make([]string, len(c.Brokers))
	for i, b := range c.Brokers {
		sasl[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
		b.listeners = "SASL_PLAINTEXT://" + sasl[i]
		b.extra = append(b.extra, "--broker-rack", fmt.Sprintf("rack-%d", b.NodeID))
	}
	c.StartAll()
	adm := kadm.NewClient(c.Client(t)) // PLAINTEXT: the super user
	const topic, group = "acl-replicated", "acl-readers"
	createClusterTopic(t, adm, topic, 1, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("2")})
	ps := c.WaitFullISR(t, adm, topic, 60*time.Second)
	leader := ps[0].Leader
	follower := ps[0].Replicas[0]
	if follower == leader {
		follower = ps[0].Replicas[1]
	}

	b1 := c.Brokers[0]
	b1.sediment(t, "", "user", "set", "writer", "--password", "writer-pw")
	b1.sediment(t, "", "user", "set", "reader", "--password", "reader-pw")
	b1.sediment(t, "", "acl", "create", "--allow-principal", "User:reader", "--consumer", "--topic", topic, "--group", group)
	b1.sediment(t, "", "acl", "create", "--allow-principal", "User:writer", "--producer", "--topic", topic)

	// Every broker knows both users and their ACLs once each, on its own
	// SASL listener, shows them the topic (DESCRIBE, which WRITE and READ
	// imply). The writer's ACLs came last in the metadata log, so a
	// broker that has them has the reader's group ACL too.
	for _, user := range []string{"writer", "reader"} {
		for i := range c.Brokers {
			waitFor(t, 60*time.Second, fmt.Sprintf("broker %d to show %s the topic", i+1, user), func() bool {
				cl, err := kgo.NewClient(kgo.SeedBrokers(sasl[i]), kgo.SASL(scram.Auth{User: user, Pass: user + "-pw"}.AsSha256Mechanism()),
					kgo.RequestRetries(0), kgo.DialTimeout(3*time.Second))
				if err != nil {
					return false
				}
				defer cl.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				req := kmsg.NewPtrMetadataRequest()
				rt := kmsg.NewMetadataRequestTopic()
				rt.Topic = kmsg.StringPtr(topic)
				req.Topics = append(req.Topics, rt)
				resp, err := req.RequestWith(ctx, cl)
				return err == nil && len(resp.Topics) == 1 && resp.Topics[0].ErrorCode == 0
			})
		}
	}

	// acks=all through the SASL listeners, idempotent (InitProducerId:
	// WRITE on a topic suffices, KIP-679).
	const n = 500
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The delivery timeout ends the test if replication is refused (a
	// produce in flight does not end with ctx).
	prod := saslClient(t, "writer", sasl[:1], kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic),
		kgo.RecordDeliveryTimeout(60*time.Second))
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Key: []byte("k" + strconv.Itoa(i%10)), Value: []byte(strconv.Itoa(i))})
	}
	results := prod.ProduceSync(ctx, recs...)
	if err := results.FirstErr(); err != nil {
		t.Fatalf("acks=all produce as writer: %v", err)
	}
	for i, r := range results {
		if r.Record.Offset != int64(i) {
			t.Fatalf("record %d acknowledged at offset %d", i, r.Record.Offset)
		}
	}
	c.WaitIdenticalReplicas(t, topic, 1, 60*time.Second)

	// The reader, in the follower's rack, seeded with the follower's SASL
	// listener only, reads everything from the follower in a group.
	hooks := &batchesByBroker{n: map[int32]int{}}
	cons := saslClient(t, "reader", sasl[follower-1:follower], kgo.ConsumeTopics(topic), kgo.ConsumerGroup(group),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.Rack(fmt.Sprintf("rack-%d", follower)), kgo.WithHooks(hooks))
	next := 0
	for next < n && ctx.Err() == nil {
		fs := cons.PollFetches(ctx)
		fs.EachError(func(tp string, p int32, err error) {
			if ctx.Err() == nil {
				t.Fatalf("reader: fetch %s-%d: %v", tp, p, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Value) != strconv.Itoa(next) || string(r.Key) != "k"+strconv.Itoa(next%10) {
				t.Fatalf("reader: record %d is %s=%s", next, r.Key, r.Value)
			}
			next++
		})
	}
	if next != n {
		t.Fatalf("reader read %d records, want %d: %v", next, n, ctx.Err())
	}
	if by := hooks.get(); by[follower] == 0 || len(by) != 1 {
		t.Errorf("reader in rack-%d read batches %v; want all from the follower %d (leader %d)", follower, by, follower, leader)
	}
	if err := cons.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("reader: commit: %v", err)
	}
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := offs.Lookup(topic, 0); o.At != n {
		t.Errorf("group %s committed %+v, want %d", group, o, n)
	}

	// A replica fetch from the writer, who has no CLUSTER_ACTION.
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	topicID := md.Topics[topic].ID
	replicaFetch := func(cl *kgo.Client, broker int32) (*kmsg.FetchResponse, error) {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID = 1       // up to v14
		req.ReplicaState.ID = 1 // v15 and later
		req.ReplicaState.Epoch = -1
		req.MaxWaitMillis = 0
		req.MaxBytes = 1 << 20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, topicID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = 0, 0, 1<<20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := cl.Broker(int(broker)).Request(ctx, req)
		if err != nil {
			return nil, err
		}
		return resp.(*kmsg.FetchResponse), nil
	}
	fetchV12 := kversion.Stable()
	fetchV12.SetMaxKeyVersion(kmsg.Fetch.Int16(), 12)
	for _, v := range []struct {
		name string
		cl   *kgo.Client
	}{
		{"newest", saslClient(t, "writer", sasl)},
		{"v12", saslClient(t, "writer", sasl, kgo.MaxVersions(fetchV12))},
	} {
		// The client learns the brokers' ids from Metadata first.
		if _, err := kadm.NewClient(v.cl).BrokerMetadata(ctx); err != nil {
			t.Fatalf("%s: Metadata as writer: %v", v.name, err)
		}
		resp, err := replicaFetch(v.cl, leader)
		if err != nil {
			t.Fatalf("%s: replica Fetch as writer: %v", v.name, err)
		}
		if (v.name == "newest" && resp.Version < 15) || (v.name == "v12" && resp.Version != 12) {
			t.Errorf("%s: the replica Fetch went out at v%d", v.name, resp.Version)
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); !errors.Is(err, kerr.ClusterAuthorizationFailed) {
			t.Errorf("%s: replica Fetch (v%d) as writer to the leader %d: error %v, want CLUSTER_AUTHORIZATION_FAILED", v.name, resp.Version, leader, err)
		}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if len(rp.RecordBatches) > 0 {
					t.Errorf("%s: replica Fetch as writer got %d bytes of records", v.name, len(rp.RecordBatches))
				}
			}
		}
		t.Logf("%s: replica Fetch v%d as writer: %v", v.name, resp.Version, kerr.ErrorForCode(resp.ErrorCode))
	}
}

// TestACLKcatReadDenied: a user who may describe and write a topic but not
// read it (the --producer ACLs) is told so by kcat -C, which exits with
// librdkafka's "Topic authorization failed" instead of retrying a Fetch
// response it cannot parse. (The denied partitions' record set must be
// empty, not null: librdkafka 2.0.2 refused the null one, "invalid
// MessageSetSize -1", and fetched again at once, forever.)
func TestACLKcatReadDenied(t *testing.T) {
	saslPlain := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	b := StartBroker(t, BrokerOptions{Listeners: "SASL_PLAINTEXT://" + saslPlain, ExtraArgs: authorizerArgs})
	b.sediment(t, "", "user", "set", "alice", "--password", "alice-pw")
	b.sediment(t, "", "topic", "create", "t", "--partitions", "1")
	b.sediment(t, "", "acl", "create", "--allow-principal", "User:alice", "--producer", "--topic", "t")
	b.sediment(t, "one\ntwo\n", "produce", "t")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcatPath(t), "-b", saslPlain, "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=SCRAM-SHA-256",
		"-X", "sasl.username=alice", "-X", "sasl.password=alice-pw", "-C", "-t", "t", "-o", "beginning", "-e")
	cmd.Env = brokerEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("kcat -C as alice without READ did not exit within 30s; stderr starts %q", firstLine(stderr.String()))
	}
	if err == nil || !hasAuthzError(stderr.String()) || stdout.Len() > 0 {
		t.Fatalf("kcat -C as alice without READ: err %v (want a failure), stdout %q, stderr:\n%s", err, stdout.String(), stderr.String())
	}
	if strings.Contains(stderr.String(), "PROTOERR") {
		t.Errorf("librdkafka could not parse the broker's Fetch response:\n%s", stderr.String())
	}
	t.Logf("kcat -C as alice without READ: %v, stderr starts %q", err, firstLine(stderr.String()))
}

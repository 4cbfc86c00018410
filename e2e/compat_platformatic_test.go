package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// platformaticDir is the npm project with the @platformatic/kafka script
// (its package-lock.json pins @platformatic/kafka 1.35.0, the last 1.x
// release: 2.x needs Node.js 22, and machines here have 20).
const platformaticDir = "platformatic"

// testPlatformatic runs e2e/platformatic/run.mjs: @platformatic/kafka, a
// pure JavaScript client for Kafka 3.5 to 4.1 at current API versions:
// admin calls, an idempotent producer over four codecs, a classic and a
// KIP-848 group member each reading everything and committing, an
// exactly-once copy in transactions with an aborted one, and the admin API
// on a scratch topic; then checks its report and, with franz-go and kadm,
// the logs and the groups' offsets.
func testPlatformatic(t *testing.T, b *Broker) {
	node := npmProjectReady(t, platformaticDir, filepath.Join("@platformatic", "kafka"))
	const n = 300
	prefix := "plt"
	r := run(t, "", nil, node, filepath.Join(platformaticDir, "run.mjs"), b.Addr, prefix, strconv.Itoa(n))
	if r.Err != nil {
		t.Fatalf("run.mjs: %v\nstdout:\n%s\nstderr:\n%s", r.Err, r.Stdout, r.Stderr)
	}
	type config struct {
		Value  string `json:"value"`
		Source int    `json:"source"` // 1 topic, 5 default
	}
	var report struct {
		AlreadyExists string         `json:"alreadyExists"`
		Topics        []string       `json:"topics"`
		Classic       []scriptRecord `json:"classic"`
		Modern        []scriptRecord `json:"modern"`
		Copied        int            `json:"copied"`
		Transactions  int            `json:"transactions"`
		Out           []scriptRecord `json:"out"`
		Groups        map[string]*struct {
			State string `json:"state"`
			Type  string `json:"type"`
		} `json:"groups"`
		Admin struct {
			AfterIncremental map[string]config `json:"afterIncremental"`
			AfterAlter       map[string]config `json:"afterAlter"`
			Offsets          map[string]int64  `json:"offsets"`
			GroupOffsets     map[string]int64  `json:"groupOffsets"`
			GroupState       string            `json:"groupState"`
			LogDirPartitions []int32           `json:"logDirPartitions"`
			TopicsAfter      []string          `json:"topicsAfter"`
		} `json:"admin"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &report); err != nil {
		t.Fatalf("run.mjs report is not JSON: %v\n%s\nstderr:\n%s", err, r.Stdout, r.Stderr)
	}
	t.Logf("copied %d records in %d transactions", report.Copied, report.Transactions)
	in, out := prefix+"-in", prefix+"-out"
	if report.AlreadyExists != "TOPIC_ALREADY_EXISTS" {
		t.Errorf("creating %s again: %q, want TOPIC_ALREADY_EXISTS", in, report.AlreadyExists)
	}
	if strings.Join(report.Topics, ",") != in+","+out {
		t.Errorf("listTopics: %v", report.Topics)
	}
	want := map[string]string{}
	copies := map[string]string{}
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("%s-k-%04d", prefix, i)
		want[k] = fmt.Sprintf("v-%d", i)
		copies[k] = fmt.Sprintf("V-%d|%d", i, i)
	}
	for _, member := range []struct {
		what string
		recs []scriptRecord
	}{{"classic member", report.Classic}, {"KIP-848 member", report.Modern}} {
		c := newCollector()
		for _, m := range member.recs {
			c.add(m.P, m.O, m.K, m.V)
			if len(m.H) != 1 || m.H[0][0] != "i" || "v-"+m.H[0][1] != m.V {
				t.Errorf("%s: %s: headers %v", member.what, m.K, m.H)
			}
		}
		c.check(t, "@platformatic/kafka "+member.what, want)
	}
	consumeFranz(t, b, in, n).check(t, "franz-go", want)
	checkCommitted(t, b, prefix+"-classic", in)
	checkCommitted(t, b, prefix+"-modern", in)

	// The copy: every record once, read_committed, by the client and by
	// franz-go; the decoys of the aborted transaction only read uncommitted.
	if report.Copied != n {
		t.Errorf("copied %d, want %d", report.Copied, n)
	}
	c := newCollector()
	for _, m := range report.Out {
		c.add(m.P, m.O, m.K, m.V)
	}
	c.check(t, "@platformatic/kafka read_committed", copies)
	checkTxnCopy(t, b, out, copies, 20)
	checkCommitted(t, b, prefix+"-eos", in)

	// Admin calls on the scratch topic: IncrementalAlterConfigs sets one
	// config; AlterConfigs replaces the set, so it goes back to its
	// default; CreatePartitions 2 -> 3; DeleteRecords moves partition 0's
	// start to 2 (ListOffsets earliest), 5 records in partition 1
	// (latest), none in the new one; AlterConsumerGroupOffsets then
	// OffsetDelete of one partition; DescribeGroups; DescribeLogDirs;
	// DeleteGroups; DeleteTopics.
	a := report.Admin
	if c := a.AfterIncremental["retention.ms"]; c.Value != "3600000" || c.Source != 1 {
		t.Errorf("retention.ms after IncrementalAlterConfigs: %+v", c)
	}
	if c := a.AfterAlter["retention.ms"]; c.Value != "604800000" || c.Source != 5 {
		t.Errorf("retention.ms after AlterConfigs of cleanup.policy alone: %+v, want the default", c)
	}
	if c := a.AfterAlter["cleanup.policy"]; c.Value != "compact" || c.Source != 1 {
		t.Errorf("cleanup.policy after AlterConfigs: %+v", c)
	}
	if a.Offsets["0"] != 2 || a.Offsets["1"] != 5 || a.Offsets["2"] != 0 || len(a.Offsets) != 3 {
		t.Errorf("ListOffsets after DeleteRecords and CreatePartitions: %v, want 0:2 1:5 2:0", a.Offsets)
	}
	if len(a.GroupOffsets) != 1 || a.GroupOffsets["0"] != 3 || a.GroupState != "EMPTY" {
		t.Errorf("group offsets %v (want 0:3 after deleting 1's), state %q", a.GroupOffsets, a.GroupState)
	}
	if fmt.Sprint(a.LogDirPartitions) != "[0 1]" || len(a.TopicsAfter) != 0 {
		t.Errorf("DescribeLogDirs partitions %v; topics left after DeleteTopics %v", a.LogDirPartitions, a.TopicsAfter)
	}

	for g, typ := range map[string]string{prefix + "-classic": "classic", prefix + "-modern": "consumer", prefix + "-eos": "classic"} {
		if st := report.Groups[g]; st == nil || st.State != "EMPTY" || st.Type != typ {
			t.Errorf("listGroups: %s is %+v, want EMPTY %s", g, st, typ)
		}
	}
}

// TestPlatformaticSASL runs e2e/platformatic/sasl.mjs: @platformatic/kafka
// logs in with PLAIN, its own SCRAM-SHA-256 and SCRAM-SHA-512, and
// OAUTHBEARER (an unsigned token, the broker taking them) on SaslHandshake
// v1 and SaslAuthenticate v2, writing five records with each; franz-go
// reads the twenty back; a wrong SCRAM password fails.
func TestPlatformaticSASL(t *testing.T) {
	node := npmProjectReady(t, platformaticDir, filepath.Join("@platformatic", "kafka"))
	saslPlain := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	b := StartBroker(t, BrokerOptions{
		Listeners: "SASL_PLAINTEXT://" + saslPlain,
		ExtraArgs: []string{"--sasl-enabled-mechanisms", "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER", "--sasl-oauthbearer-unsecured"},
	})
	b.sediment(t, "", "user", "set", "pat", "--password", "pat-pw")
	const topic = "plt-sasl"
	b.sediment(t, "", "topic", "create", topic, "--partitions", "1")
	r := run(t, "", nil, node, filepath.Join(platformaticDir, "sasl.mjs"), saslPlain, topic, "pat", "pat-pw")
	if r.Err != nil {
		t.Fatalf("sasl.mjs: %v\nstdout:\n%s\nstderr:\n%s", r.Err, r.Stdout, r.Stderr)
	}
	var report struct {
		Produced      []string `json:"produced"`
		WrongPassword string   `json:"wrongPassword"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &report); err != nil {
		t.Fatalf("sasl.mjs report: %v\n%s\n%s", err, r.Stdout, r.Stderr)
	}
	want := map[string]string{}
	for _, k := range report.Produced {
		want[k] = "v-" + k
	}
	if len(want) != 20 {
		t.Fatalf("produced %v", report.Produced)
	}
	consumeFranz(t, b, topic, len(want)).check(t, topic, want)
	if report.WrongPassword == "accepted" || report.WrongPassword == "" {
		t.Errorf("a wrong SCRAM password: %q", report.WrongPassword)
	}
	t.Logf("@platformatic/kafka with a wrong password: %s", report.WrongPassword)
}

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkajsDir is the npm project with the kafkajs script (its package-lock.json
// pins kafkajs 2.2.4); node_modules is installed there by `npm ci`.
const kafkajsDir = "kafkajs"

// kafkajsReady installs the pinned kafkajs (npmProjectReady).
func kafkajsReady(t *testing.T) (node string) {
	t.Helper()
	return npmProjectReady(t, kafkajsDir, "kafkajs")
}

// npmProjectReady installs the npm project in e2e/dir with `npm ci` (its
// package-lock.json pins every package) and checks that module is there.
// Without node the test is skipped locally and fails in CI (CI=true); an
// install failure likewise fails in CI and skips elsewhere (e.g. offline).
func npmProjectReady(t *testing.T, dir, module string) (node string) {
	t.Helper()
	inCI := os.Getenv("CI") == "true"
	giveUp := func(format string, args ...any) {
		t.Helper()
		if inCI {
			t.Fatalf(format, args...)
		}
		t.Skipf(format, args...)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		giveUp("node is not installed: %v", err)
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		giveUp("npm is not installed: %v", err)
	}
	r := run(t, "", []string{"npm_config_update_notifier=false"}, npm, "ci", "--prefix", dir,
		"--no-audit", "--no-fund", "--prefer-offline")
	if r.Err != nil {
		giveUp("npm ci in e2e/%s: %v\n%s\n%s", dir, r.Err, r.Stdout, r.Stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", module, "package.json")); err != nil {
		t.Fatalf("npm ci did not install %s: %v", module, err)
	}
	return node
}

// testKafkaJS runs e2e/kafkajs/run.js (create topic, idempotent produce with
// and without gzip, group consume with commits, offsets fetch) and checks
// its report and the records themselves with franz-go.
func testKafkaJS(t *testing.T, b *Broker) {
	node := kafkajsReady(t)
	const n = 300
	topic, group := "kafkajs-topic", "kafkajs-group"
	r := run(t, "", nil, node, filepath.Join(kafkajsDir, "run.js"), b.Addr, topic, group, fmt.Sprint(n))
	if r.Err != nil {
		t.Fatalf("node run.js: %v\nstdout:\n%s\nstderr:\n%s", r.Err, r.Stdout, r.Stderr)
	}
	var report struct {
		Produced int `json:"produced"`
		Consumed []struct {
			Member    int    `json:"member"`
			Partition int32  `json:"partition"`
			Offset    string `json:"offset"`
			Key       string `json:"key"`
			Value     string `json:"value"`
			Header    string `json:"header"`
		} `json:"consumed"`
		Offsets []struct {
			Partition int32 `json:"partition"`
			Offset    int64 `json:"offset"`
		} `json:"offsets"`
		Ends []struct {
			Partition int32 `json:"partition"`
			Offset    int64 `json:"offset"`
		} `json:"ends"`
		Groups         []string `json:"groups"`
		DescribedGroup struct {
			State        string `json:"state"`
			ProtocolType string `json:"protocolType"`
			ErrorCode    int    `json:"errorCode"`
		} `json:"describedGroup"`
		Admin struct {
			RetentionBefore        string   `json:"retentionBefore"`
			RetentionAfter         string   `json:"retentionAfter"`
			PartitionsAfterCreate  int      `json:"partitionsAfterCreate"`
			P0Low                  int64    `json:"p0Low"`
			P0High                 int64    `json:"p0High"`
			GroupsAfterDelete      []string `json:"groupsAfterDelete"`
			OtherListedAfterDelete bool     `json:"otherListedAfterDelete"`
		} `json:"admin"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &report); err != nil {
		t.Fatalf("kafkajs report is not JSON: %v\n%s\nstderr:\n%s", err, r.Stdout, r.Stderr)
	}
	want := map[string]string{}
	for i := 0; i < n; i++ {
		want[fmt.Sprintf("js-k-%d", i)] = fmt.Sprintf("v-%d", i)
	}
	c := newCollector()
	perMember := [2]int{}
	for _, m := range report.Consumed {
		if m.Member == 0 || m.Member == 1 {
			perMember[m.Member]++
		}
		var off int64
		fmt.Sscan(m.Offset, &off)
		c.add(m.Partition, off, m.Key, m.Value)
		if m.Header != "x"+strings.TrimPrefix(m.Key, "js-k-") {
			t.Errorf("kafkajs read header h=%q for %s", m.Header, m.Key)
		}
	}
	c.check(t, "kafkajs consumers", want)
	if perMember[0] == 0 || perMember[1] == 0 {
		t.Errorf("kafkajs group members read %v records, want both some", perMember)
	}
	// The same records through franz-go: idempotent batches written as
	// kafkajs sent them.
	consumeFranz(t, b, topic, n).check(t, "franz-go reading kafkajs's records", want)

	ends := map[int32]int64{}
	var total int64
	for _, e := range report.Ends {
		ends[e.Partition] = e.Offset
		total += e.Offset
	}
	if total != n {
		t.Errorf("kafkajs fetchTopicOffsets: high watermarks add up to %d, want %d", total, n)
	}
	for _, o := range report.Offsets {
		if o.Offset != ends[o.Partition] && !(o.Offset == -1 && ends[o.Partition] == 0) {
			t.Errorf("kafkajs fetchOffsets: partition %d committed %d, want %d", o.Partition, o.Offset, ends[o.Partition])
		}
	}
	// Transactions: read_committed sees the 20 committed records only; the
	// transactional offset commit landed.
	txn := map[string]string{}
	for i := 0; i < 20; i++ {
		txn[fmt.Sprintf("js-txn-c-%d", i)] = fmt.Sprintf("tv-%d", i)
	}
	consumeFranz(t, b, topic+"-txn", len(txn), kgo.FetchIsolationLevel(kgo.ReadCommitted())).check(t, "kafkajs transactions, read_committed", txn)
	{
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		offs, err := b.Admin(t).FetchOffsets(ctx, group+"-txn")
		if err != nil {
			t.Fatalf("fetch offsets of %s-txn: %v", group, err)
		}
		if o, ok := offs.Lookup(topic, 0); !ok || o.At != 5 {
			t.Errorf("kafkajs sendOffsets in a committed transaction: %s/0 at %+v (found %v), want 5", topic, o.At, ok)
		}
	}

	// run.js deleted the group after reading its offsets (above): none are
	// left.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if left, err := b.Admin(t).FetchOffsets(ctx, group); err != nil || len(left) != 0 {
		t.Errorf("offsets of %s after kafkajs deleteGroups: %v, %v; want none", group, left, err)
	}
	found := false
	for _, g := range report.Groups {
		found = found || g == group
	}
	if !found {
		t.Errorf("kafkajs listGroups = %v, want %s among them", report.Groups, group)
	}
	if d := report.DescribedGroup; d.State != "Empty" || d.ProtocolType != "consumer" || d.ErrorCode != 0 {
		t.Errorf("kafkajs describeGroups after the consumer left: %+v, want Empty, consumer", d)
	}
	a := report.Admin
	if a.RetentionBefore != "3600000" || a.RetentionAfter != "86400000" {
		t.Errorf("kafkajs describeConfigs/alterConfigs: retention.ms %q then %q, want 3600000 then 86400000", a.RetentionBefore, a.RetentionAfter)
	}
	if a.PartitionsAfterCreate != 4 {
		t.Errorf("kafkajs createPartitions: %d partitions, want 4", a.PartitionsAfterCreate)
	}
	if a.P0Low != 2 || a.P0High != 3 {
		t.Errorf("kafkajs deleteTopicRecords: partition 0 offsets [%d, %d), want [2, 3)", a.P0Low, a.P0High)
	}
	for _, g := range a.GroupsAfterDelete {
		if g == group {
			t.Errorf("kafkajs deleteGroups: %s still listed", group)
		}
	}
	if a.OtherListedAfterDelete {
		t.Errorf("kafkajs deleteTopics: the topic is still listed")
	}
}

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// testKafkaPython runs e2e/kafkapython/clients.py: kafka-python's admin
// client, producers (gzip with acks=all, none with acks=1, headers, its
// murmur2 partitioner), a consumer group and a second member that resumes
// at the committed offsets, offset lookups and a manually assigned re-read;
// then checks its report and, with franz-go and kadm, the log and the
// group's offsets.
func testKafkaPython(t *testing.T, b *Broker) {
	py := debianPythonReady(t, "kafka", "python3-kafka")
	const n, partitions = 400, 3
	prefix := "kpy"
	r := run(t, "", nil, py, filepath.Join("kafkapython", "clients.py"), b.Addr, prefix, strconv.Itoa(n))
	if r.Err != nil {
		t.Fatalf("clients.py: %v\nstdout:\n%s\nstderr:\n%s", r.Err, r.Stdout, r.Stderr)
	}
	var report struct {
		Version         string            `json:"kafka_python"`
		APIVersion      []int             `json:"api_version"`
		AlreadyExists   bool              `json:"already_exists"`
		InvalidTopic    bool              `json:"invalid_topic"`
		Configs         map[string]string `json:"configs"`
		Produced        []scriptRecord    `json:"produced"`
		Consumed        []scriptRecord    `json:"consumed"`
		Committed       map[string]int64  `json:"committed"`
		SecondMember    int               `json:"second_member"`
		SecondPositions map[string]int64  `json:"second_positions"`
		Beginning       map[string]int64  `json:"beginning"`
		End             map[string]int64  `json:"end"`
		OffsetsForTimes map[string]*int64 `json:"offsets_for_times"`
		RereadP0        []int64           `json:"reread_p0"`
		Groups          []string          `json:"groups"`
		GroupOffsets    map[string]int64  `json:"group_offsets"`
		GroupState      string            `json:"group_state"`
		TopicsAfter     []string          `json:"topics_after_delete"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &report); err != nil {
		t.Fatalf("clients.py report is not JSON: %v\n%s\nstderr:\n%s", err, r.Stdout, r.Stderr)
	}
	t.Logf("kafka-python %s, broker version guessed %v", report.Version, report.APIVersion)
	topic, group := prefix+"-t", prefix+"-g"
	if !report.AlreadyExists || !report.InvalidTopic {
		t.Errorf("create again: TopicAlreadyExistsError %v; bad name: InvalidTopicError %v", report.AlreadyExists, report.InvalidTopic)
	}
	if report.Configs["retention.ms"] != "86400000" || report.Configs["cleanup.policy"] != "delete" {
		t.Errorf("describe_configs: %v", report.Configs)
	}

	// Each key went where Java's (and franz-go's) murmur2 partitioner puts
	// it, and the offsets the producer was told are where the records are.
	javaPartition := kgo.StickyKeyPartitioner(nil).ForTopic(topic)
	want := map[string]string{}
	at := map[string]scriptRecord{}
	for _, p := range report.Produced {
		want[p.K] = p.V
		at[p.K] = p
		if wp := int32(javaPartition.Partition(&kgo.Record{Key: []byte(p.K)}, partitions)); p.P != wp {
			t.Errorf("key %s went to partition %d, murmur2 says %d", p.K, p.P, wp)
		}
	}
	if len(want) != n {
		t.Fatalf("produced %d distinct records, want %d", len(want), n)
	}
	c := newCollector()
	for _, m := range report.Consumed {
		c.add(m.P, m.O, m.K, m.V)
		if p := at[m.K]; p.P != m.P || p.O != m.O {
			t.Errorf("%s read at %d/%d, produced at %d/%d", m.K, m.P, m.O, p.P, p.O)
		}
		if len(m.H) != 1 || m.H[0][0] != "i" || "v-"+m.H[0][1] != m.V {
			t.Errorf("%s: headers %v", m.K, m.H)
		}
	}
	c.check(t, "kafka-python group member", want)
	franz := consumeFranz(t, b, topic, n)
	franz.check(t, "franz-go", want)

	var ends int64
	for p := 0; p < partitions; p++ {
		k := strconv.Itoa(p)
		ends += report.End[k]
		if report.Beginning[k] != 0 || report.Committed[k] != report.End[k] || report.GroupOffsets[k] != report.End[k] {
			t.Errorf("partition %d: beginning %d, end %d, committed %d, group offsets %d", p,
				report.Beginning[k], report.End[k], report.Committed[k], report.GroupOffsets[k])
		}
		if o := report.OffsetsForTimes[fmt.Sprintf("%s-%d", topic, p)]; o == nil || *o != 0 {
			t.Errorf("offsets_for_times(0) of partition %d: %v, want 0", p, o)
		}
	}
	if ends != n {
		t.Errorf("end offsets sum to %d, want %d", ends, n)
	}
	if o, ok := report.OffsetsForTimes[prefix+"-scratch-0"]; !ok || o != nil {
		t.Errorf("offsets_for_times(an hour ahead) of an empty topic: %v, want None", o)
	}
	if report.SecondMember != 0 || len(report.SecondPositions) != partitions {
		t.Errorf("a second member of the group read %d records after the commit (want 0), positions %v", report.SecondMember, report.SecondPositions)
	}
	for p, o := range report.SecondPositions {
		if o != report.End[p] {
			t.Errorf("the second member resumed partition %s at %d, want the committed %d", p, o, report.End[p])
		}
	}
	if int64(len(report.RereadP0)) != report.End["0"] {
		t.Errorf("re-read of partition 0: %d records, want %d", len(report.RereadP0), report.End["0"])
	}
	checkCommitted(t, b, group, topic)
	if len(report.Groups) != 1 || report.GroupState != "Empty" {
		t.Errorf("list_consumer_groups %v, state %q; want the group, Empty", report.Groups, report.GroupState)
	}
	if strings.Join(report.TopicsAfter, ",") != topic {
		t.Errorf("topics after deleting the scratch topic: %v", report.TopicsAfter)
	}
}

// testKafkaPythonCodecs runs e2e/kafkapython/codecs.py: kafka-python writes
// 50 keyed records with each of gzip, snappy (xerial framing), lz4 and
// zstd (Debian's python3-snappy, python3-lz4, python3-zstandard), after
// franz-go wrote 20 with each of the same codecs; kafka-python reads all
// 280 back, and so does franz-go.
func testKafkaPythonCodecs(t *testing.T, b *Broker) {
	py := debianPythonReady(t, "kafka", "python3-kafka")
	for module, pkg := range map[string]string{"snappy": "python3-snappy", "lz4.frame": "python3-lz4", "zstandard": "python3-zstandard"} {
		debianPythonReady(t, module, pkg)
	}
	const topic = "kpy-codecs"
	b.sediment(t, "", "topic", "create", topic, "--partitions", "2")
	want := map[string]string{}
	for name, codec := range map[string]kgo.CompressionCodec{"gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()} {
		cl := b.Client(t, kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(codec))
		var recs []*kgo.Record
		for i := range 20 {
			k, v := fmt.Sprintf("go-%s-%02d", name, i), strings.Repeat(fmt.Sprintf("go-value-%d", i), 20)
			want[k] = v
			recs = append(recs, &kgo.Record{Key: []byte(k), Value: []byte(v)})
		}
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatalf("franz-go produce: %v", err)
		}
		cl.Close()
	}
	total := len(want) + 4*50
	r := run(t, "", nil, py, filepath.Join("kafkapython", "codecs.py"), b.Addr, topic, strconv.Itoa(total))
	if r.Err != nil {
		t.Fatalf("codecs.py: %v\nstdout:\n%s\nstderr:\n%s", r.Err, r.Stdout, r.Stderr)
	}
	var report struct {
		Produced map[string]string `json:"produced"`
		Consumed map[string]string `json:"consumed"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &report); err != nil {
		t.Fatalf("codecs.py report: %v\n%s\n%s", err, r.Stdout, r.Stderr)
	}
	for k, v := range report.Produced {
		want[k] = v
	}
	if len(want) != total {
		t.Fatalf("%d distinct records, want %d", len(want), total)
	}
	for k, v := range want {
		if report.Consumed[k] != v {
			t.Errorf("kafka-python read %s as %.20q, want %.20q", k, report.Consumed[k], v)
		}
	}
	consumeFranz(t, b, topic, total).check(t, topic, want)
}

// testKafkaPythonGroup runs e2e/kafkapython/group.py: three kafka-python
// consumers of one group start together on a topic of six partitions
// holding 600 records; together they read all of them, and their final
// assignments cover each partition exactly once (two each).
func testKafkaPythonGroup(t *testing.T, b *Broker) {
	py := debianPythonReady(t, "kafka", "python3-kafka")
	const topic, group, n = "kpy-group", "kpy-group-g", 600
	b.sediment(t, "", "topic", "create", topic, "--partitions", "6")
	cl := b.Client(t, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Key: []byte(fmt.Sprintf("k%03d", i)), Value: []byte("v")})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := run(t, "", nil, py, filepath.Join("kafkapython", "group.py"), b.Addr, topic, group, strconv.Itoa(n))
	if r.Err != nil {
		t.Fatalf("group.py: %v\nstdout:\n%s\nstderr:\n%s", r.Err, r.Stdout, r.Stderr)
	}
	var report struct {
		Seen        int              `json:"seen"`
		Duplicates  int              `json:"duplicates"`
		Assignments map[string][]int `json:"assignments"`
		Errors      []string         `json:"errors"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &report); err != nil {
		t.Fatalf("group.py report: %v\n%s\n%s", err, r.Stdout, r.Stderr)
	}
	if len(report.Errors) > 0 || report.Seen != n {
		t.Fatalf("three kafka-python members read %d of %d records; errors %v", report.Seen, n, report.Errors)
	}
	owner := map[int]string{}
	for m, parts := range report.Assignments {
		if len(parts) != 2 {
			t.Errorf("member %s ends with partitions %v, want two", m, parts)
		}
		for _, p := range parts {
			if o, ok := owner[p]; ok {
				t.Errorf("partition %d assigned to members %s and %s", p, o, m)
			}
			owner[p] = m
		}
	}
	if len(owner) != 6 {
		t.Errorf("final assignments %v cover %d partitions, want 6", report.Assignments, len(owner))
	}
	t.Logf("three kafka-python members: %d records, %d read twice across rebalances, assignments %v", report.Seen, report.Duplicates, report.Assignments)
}

// TestKafkaPythonAdmin runs e2e/kafkapython/admin.py against a broker
// process with the authorizer on: kafka-python's admin client creates an
// ACL, finds it with a filter and deletes it (CreateAcls, DescribeAcls,
// DeleteAcls at its versions), grows a topic to four partitions, changes
// a topic config with AlterConfigs, and deletes a consumer group whose
// offsets it committed.
func TestKafkaPythonAdmin(t *testing.T) {
	py := debianPythonReady(t, "kafka", "python3-kafka")
	b := StartBroker(t, BrokerOptions{ExtraArgs: authorizerArgs})
	const topic, group = "kpy-admin", "kpy-admin-g"
	b.sediment(t, "", "topic", "create", topic, "--partitions", "2")
	cl := b.Client(t, kgo.DefaultProduceTopic(topic))
	if err := cl.ProduceSync(context.Background(), kgo.StringRecord("a"), kgo.StringRecord("b")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := run(t, "", nil, py, filepath.Join("kafkapython", "admin.py"), b.Addr, topic, group)
	if r.Err != nil {
		t.Fatalf("admin.py: %v\nstdout:\n%s\nstderr:\n%s", r.Err, r.Stdout, r.Stderr)
	}
	var report struct {
		Created       int        `json:"created"`
		CreateFailed  []string   `json:"create_failed"`
		Described     [][]string `json:"described"`
		Deleted       int        `json:"deleted"`
		AfterDelete   int        `json:"after_delete"`
		Partitions    int        `json:"partitions"`
		RetentionMs   string     `json:"retention_ms"`
		OffsetsBefore int        `json:"offsets_before"`
		GroupDeleted  [][]string `json:"group_deleted"`
		GroupsAfter   []string   `json:"groups_after"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &report); err != nil {
		t.Fatalf("admin.py report: %v\n%s\n%s", err, r.Stdout, r.Stderr)
	}
	if report.Created != 1 || len(report.CreateFailed) != 0 || len(report.Described) != 1 ||
		strings.Join(report.Described[0], " ") != "User:bob READ ALLOW "+topic || report.Deleted != 1 || report.AfterDelete != 0 {
		t.Errorf("ACLs: %+v", report)
	}
	if report.Partitions != 4 || report.RetentionMs != "3600000" {
		t.Errorf("partitions %d (want 4), retention.ms %q (want 3600000)", report.Partitions, report.RetentionMs)
	}
	if report.OffsetsBefore == 0 || len(report.GroupDeleted) != 1 || report.GroupDeleted[0][1] != "NoError" || slices.Contains(report.GroupsAfter, group) {
		t.Errorf("group: offsets %d, deleted %v, groups after %v", report.OffsetsBefore, report.GroupDeleted, report.GroupsAfter)
	}
}

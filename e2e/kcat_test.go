package e2e

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKcatMetadata lists the cluster with `kcat -L`, as text and as JSON.
func TestKcatMetadata(t *testing.T) {
	t.Parallel() // see TestMain
	b := StartBroker(t, BrokerOptions{})
	b.sediment(t, "", "topic", "create", "kcat-meta", "--partitions", "3")

	text := b.kcat(t, "", "-L").Stdout
	if want := fmt.Sprintf("broker %d at %s", b.NodeID, b.Addr); !strings.Contains(text, want) {
		t.Errorf("kcat -L does not show %q:\n%s", want, text)
	}
	if want := `topic "kcat-meta" with 3 partitions:`; !strings.Contains(text, want) {
		t.Errorf("kcat -L does not show %q:\n%s", want, text)
	}

	var md struct {
		Brokers []struct {
			ID   int    `json:"id"`
			Name string `json:"name"`
		} `json:"brokers"`
		Topics []struct {
			Topic      string `json:"topic"`
			Error      string `json:"error"`
			Partitions []struct {
				Partition int `json:"partition"`
				Leader    int `json:"leader"`
				Replicas  []struct {
					ID int `json:"id"`
				} `json:"replicas"`
				ISRs []struct {
					ID int `json:"id"`
				} `json:"isrs"`
			} `json:"partitions"`
		} `json:"topics"`
	}
	out := b.kcat(t, "", "-L", "-J", "-t", "kcat-meta").Stdout
	if err := json.Unmarshal([]byte(out), &md); err != nil {
		t.Fatalf("kcat -L -J output is not JSON: %v\n%s", err, out)
	}
	if len(md.Brokers) != 1 || md.Brokers[0].ID != b.NodeID || md.Brokers[0].Name != b.Addr {
		t.Errorf("brokers = %+v, want one: id %d at %s", md.Brokers, b.NodeID, b.Addr)
	}
	if len(md.Topics) != 1 || md.Topics[0].Topic != "kcat-meta" || md.Topics[0].Error != "" {
		t.Fatalf("topics = %+v, want kcat-meta without error", md.Topics)
	}
	parts := md.Topics[0].Partitions
	if len(parts) != 3 {
		t.Fatalf("kcat-meta has %d partitions, want 3", len(parts))
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].Partition < parts[j].Partition })
	for i, p := range parts {
		if p.Partition != i || p.Leader != b.NodeID || len(p.Replicas) != 1 || p.Replicas[0].ID != b.NodeID ||
			len(p.ISRs) != 1 || p.ISRs[0].ID != b.NodeID {
			t.Errorf("partition %d: %+v, want leader, replica and ISR %d", i, p, b.NodeID)
		}
	}
}

// keyedLines returns n "key:value" lines with a few awkward contents: spaces,
// non-ASCII text, separators inside the value, an empty value.
func keyedLines(n int) []string {
	lines := make([]string, n)
	for i := range lines {
		switch i % 5 {
		case 0:
			lines[i] = fmt.Sprintf("user-%d:value %d", i%17, i)
		case 1:
			lines[i] = fmt.Sprintf("clé-%d:väl€ur %d", i%13, i)
		case 2:
			lines[i] = fmt.Sprintf("k%d:a:b:c %d", i%7, i)
		case 3:
			lines[i] = fmt.Sprintf("order-%d:{\"n\":%d}", i, i)
		default:
			lines[i] = fmt.Sprintf("empty-%d:", i)
		}
	}
	return lines
}

// TestKcatKeyedRoundTrip produces keyed lines with `kcat -P -K:` and reads
// them back with `kcat -C -e -f '%k:%s\n'` (one partition, so the order is
// total), comparing exactly; then reads them with `sediment consume` too.
func TestKcatKeyedRoundTrip(t *testing.T) {
	t.Parallel() // see TestMain
	b := StartBroker(t, BrokerOptions{})
	b.sediment(t, "", "topic", "create", "kcat-keyed", "--partitions", "1")

	lines := keyedLines(500)
	input := strings.Join(lines, "\n") + "\n"
	b.kcat(t, input, "-P", "-t", "kcat-keyed", "-K:")

	got := b.kcat(t, "", "-C", "-t", "kcat-keyed", "-o", "beginning", "-e", "-q", "-f", `%k:%s\n`).Stdout
	if got != input {
		t.Errorf("kcat consumed something else than it produced:\n%s", diffLines(input, got))
	}

	got = b.sediment(t, "", "consume", "kcat-keyed", "--exit", "--format", "key-value", "--key-separator", ":").Stdout
	if got != input {
		t.Errorf("sediment consume read something else than kcat produced:\n%s", diffLines(input, got))
	}

	// And the other way round: sediment produces, kcat consumes.
	b.sediment(t, "", "topic", "create", "kcat-keyed-2", "--partitions", "1")
	b.sediment(t, input, "produce", "kcat-keyed-2", "--key-separator", ":")
	got = b.kcat(t, "", "-C", "-t", "kcat-keyed-2", "-o", "beginning", "-e", "-q", "-f", `%k:%s\n`).Stdout
	if got != input {
		t.Errorf("kcat consumed something else than sediment produced:\n%s", diffLines(input, got))
	}
}

// TestKeyPartitioningAgrees produces the same keyed lines with kcat (using
// librdkafka's Java-compatible murmur2_random partitioner) and with `sediment
// produce` into two topics of 5 partitions, and checks that every key landed
// on the same partition in both, the one Java's partitioner picks, with each
// partition's records in produce order.
func TestKeyPartitioningAgrees(t *testing.T) {
	t.Parallel() // see TestMain
	b := StartBroker(t, BrokerOptions{})
	const partitions = 5
	b.sediment(t, "", "topic", "create", "by-kcat", "-p", strconv.Itoa(partitions))
	b.sediment(t, "", "topic", "create", "by-sediment", "-p", strconv.Itoa(partitions))

	lines := keyedLines(400)
	input := strings.Join(lines, "\n") + "\n"
	b.kcat(t, input, "-P", "-t", "by-kcat", "-K:", "-X", "partitioner=murmur2_random")
	b.sediment(t, input, "produce", "by-sediment", "--key-separator", ":")

	javaPartition := kgo.StickyKeyPartitioner(nil).ForTopic("x") // kgo's KafkaHasher(murmur2)
	for _, topic := range []string{"by-kcat", "by-sediment"} {
		records := consumeJSON(t, b, topic)
		if len(records) != len(lines) {
			t.Fatalf("%s: consumed %d records, want %d", topic, len(records), len(lines))
		}
		// Per partition, records must keep the input order.
		want := make(map[int32][]string)
		for _, line := range lines {
			k, _, _ := strings.Cut(line, ":")
			p := int32(javaPartition.Partition(&kgo.Record{Key: []byte(k)}, partitions))
			want[p] = append(want[p], line)
		}
		got := make(map[int32][]string)
		for _, r := range records {
			got[r.Partition] = append(got[r.Partition], deref(r.Key)+":"+deref(r.Value))
		}
		for p := int32(0); p < partitions; p++ {
			if strings.Join(got[p], "\n") != strings.Join(want[p], "\n") {
				t.Errorf("%s partition %d:\n%s", topic, p, diffLines(strings.Join(want[p], "\n"), strings.Join(got[p], "\n")))
			}
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// diffLines describes the first difference between two texts.
func diffLines(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if i >= len(w) || i >= len(g) || wl != gl {
			return fmt.Sprintf("%d lines wanted, %d got; first difference at line %d:\n want %q\n  got %q", len(w), len(g), i+1, wl, gl)
		}
	}
	return "(equal)"
}

// TestKcatCodecsHeadersIdempotence produces with kcat under every codec, with
// headers and with librdkafka's idempotent producer, and reads the records
// with `sediment consume`; then the other way round for headers.
func TestKcatCodecsHeadersIdempotence(t *testing.T) {
	t.Parallel() // see TestMain
	b := StartBroker(t, BrokerOptions{})
	lines := keyedLines(100)
	input := strings.Join(lines, "\n") + "\n"
	for _, codec := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		topic := "kcat-" + codec
		b.sediment(t, "", "topic", "create", topic, "-p", "2")
		b.kcat(t, input, "-P", "-t", topic, "-K:", "-z", codec,
			"-H", "codec="+codec, "-H", "trace=abc",
			"-X", "enable.idempotence=true", "-X", "partitioner=murmur2_random")
		records := consumeJSON(t, b, topic)
		if len(records) != len(lines) {
			t.Fatalf("%s: consumed %d records, want %d", topic, len(records), len(lines))
		}
		got := make(map[string]int)
		for _, r := range records {
			got[deref(r.Key)+":"+deref(r.Value)]++
			if len(r.Headers) != 2 || r.Headers[0].Key != "codec" || deref(r.Headers[0].Value) != codec ||
				r.Headers[1].Key != "trace" || deref(r.Headers[1].Value) != "abc" {
				t.Errorf("%s: headers %+v, want codec=%s, trace=abc", topic, r.Headers, codec)
				break
			}
		}
		for _, line := range lines {
			if got[line] != 1 {
				t.Errorf("%s: %q consumed %d times, want once", topic, line, got[line])
			}
		}
	}

	b.sediment(t, "", "topic", "create", "headers-to-kcat", "-p", "1")
	b.sediment(t, "k:v\n", "produce", "headers-to-kcat", "-K", ":", "-H", "a=1", "-H", "b=two")
	out := b.kcat(t, "", "-C", "-t", "headers-to-kcat", "-o", "beginning", "-e", "-q", "-f", `%k|%s|%h\n`).Stdout
	if out != "k|v|a=1,b=two\n" {
		t.Errorf("kcat read %q, want %q", out, "k|v|a=1,b=two\n")
	}
}

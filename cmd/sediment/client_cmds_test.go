package main

// Unit tests of the client commands' parsing and formatting. The commands
// themselves run end to end against real broker processes in e2e/.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestSplitBrokers(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
	}{
		{"localhost:9092", "localhost:9092"},
		{"a:1,b:2", "a:1 b:2"},
		{" a:1 , b:2 ", "a:1 b:2"},
		{"host", "host:9092"},
	} {
		got, err := splitBrokers(tc.in)
		if err != nil {
			t.Fatalf("splitBrokers(%q): %v", tc.in, err)
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("splitBrokers(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if _, err := splitBrokers(" , "); err == nil {
		t.Error("splitBrokers of an empty list succeeded")
	}
}

func TestBrokersFromEnvAndFlag(t *testing.T) {
	newCmd := func() (*cobra.Command, *clientOptions) {
		cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
		return cmd, addClientFlags(cmd)
	}

	cmd, opts := newCmd()
	cmd.SetArgs(nil)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got, _ := opts.seeds(); strings.Join(got, ",") != defaultBrokers {
		t.Errorf("default seeds = %q, want %q", got, defaultBrokers)
	}

	t.Setenv("SEDIMENT_BROKERS", "10.0.0.1:9092,10.0.0.2:9093")
	t.Setenv("SEDIMENT_TIMEOUT", "3s")
	cmd, opts = newCmd()
	cmd.SetArgs(nil)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got, _ := opts.seeds(); strings.Join(got, ",") != "10.0.0.1:9092,10.0.0.2:9093" {
		t.Errorf("seeds from SEDIMENT_BROKERS = %q", got)
	}
	if got := opts.timeout(); got != 3*time.Second {
		t.Errorf("timeout from SEDIMENT_TIMEOUT = %v", got)
	}

	cmd, opts = newCmd()
	cmd.SetArgs([]string{"--brokers", "flag:1"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got, _ := opts.seeds(); strings.Join(got, ",") != "flag:1" {
		t.Errorf("--brokers did not win over the environment: %q", got)
	}
}

func TestConnectErrorNamesTheAddress(t *testing.T) {
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	// Port 1 on loopback: nothing listens there, so the dial is refused at once.
	cmd.SetArgs([]string{"topic", "list", "--brokers", "127.0.0.1:1", "--timeout", "5s"})
	err := cmd.Execute()
	if err == nil {
		t.Fatal("topic list against a closed port succeeded")
	}
	if !strings.Contains(err.Error(), "127.0.0.1:1") || !strings.Contains(err.Error(), "cannot connect") {
		t.Errorf("error does not name the address: %v", err)
	}
}

func TestParseKeyValues(t *testing.T) {
	got, err := parseKeyValues("config", []string{"retention.ms=10", "a==b", "empty="})
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]string{{"retention.ms", "10"}, {"a", "=b"}, {"empty", ""}}
	if len(got) != len(want) {
		t.Fatalf("got %q", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("item %d = %q, want %q", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"novalue", "=v"} {
		if _, err := parseKeyValues("config", []string{bad}); err == nil {
			t.Errorf("parseKeyValues(%q) succeeded", bad)
		}
	}
}

func TestParseFromAndResolve(t *testing.T) {
	const start, end, atTime = 10, 100, 42
	for _, tc := range []struct {
		from string
		want int64
	}{
		{"earliest", 10},
		{"beginning", 10},
		{"latest", 100},
		{"end", 100},
		{"50", 50},
		{"0", 10},    // below the log start: clamped
		{"500", 100}, // past the end: wait at the end
		{"-5", 95},
		{"-1000", 10},
		{"2026-11-29T10:00:00Z", 42},
		{"2026-11-29T10:00:00.5+01:00", 42},
	} {
		spec, err := parseFrom(tc.from)
		if err != nil {
			t.Fatalf("parseFrom(%q): %v", tc.from, err)
		}
		if got := spec.resolve(start, end, atTime); got != tc.want {
			t.Errorf("--from %s resolves to %d, want %d", tc.from, got, tc.want)
		}
	}
	spec, _ := parseFrom("2026-11-29T10:00:00Z")
	if want := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC).UnixMilli(); spec.millis != want {
		t.Errorf("time millis = %d, want %d", spec.millis, want)
	}
	for _, bad := range []string{"", "yesterday", "2026-11-29", "1e3"} {
		if _, err := parseFrom(bad); err == nil {
			t.Errorf("parseFrom(%q) succeeded", bad)
		}
	}
}

func TestLineRecord(t *testing.T) {
	hdrs := []kgo.RecordHeader{{Key: "h", Value: []byte("v")}}
	r := lineRecord("t", []byte("k1:v:1"), ":", hdrs, -1, false)
	if string(r.Key) != "k1" || string(r.Value) != "v:1" || r.Topic != "t" || len(r.Headers) != 1 {
		t.Errorf("keyed line: key %q value %q", r.Key, r.Value)
	}
	r = lineRecord("t", []byte("no separator"), ":", nil, -1, false)
	if r.Key != nil || string(r.Value) != "no separator" {
		t.Errorf("line without separator: key %q value %q", r.Key, r.Value)
	}
	r = lineRecord("t", []byte("k::"), "::", nil, 3, false)
	if string(r.Key) != "k" || r.Value == nil || len(r.Value) != 0 || r.Partition != 3 {
		t.Errorf("empty value: key %q value %q (nil %v) partition %d", r.Key, r.Value, r.Value == nil, r.Partition)
	}
	r = lineRecord("t", []byte("k:"), ":", nil, -1, true)
	if r.Value != nil {
		t.Errorf("--null-empty: value %q is not null", r.Value)
	}
	r = lineRecord("t", []byte(""), "", nil, -1, false)
	if r.Key != nil || r.Value == nil {
		t.Errorf("empty line without a separator: key %q value nil=%v", r.Key, r.Value == nil)
	}
	// The record must not alias the scanner's buffer.
	line := []byte("a:b")
	r = lineRecord("t", line, ":", nil, -1, false)
	copy(line, "xxx")
	if string(r.Key) != "a" || string(r.Value) != "b" {
		t.Errorf("record aliases the input line: key %q value %q", r.Key, r.Value)
	}
}

// TestKeyPartitionerMatchesJava checks that keyed records go where Kafka's
// Java client sends them: toPositive(murmur2(key)) % partitions. The hashes
// are the ones Kafka's own UtilsTest.testMurmur2 expects.
func TestKeyPartitionerMatchesJava(t *testing.T) {
	javaMurmur2 := map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	}
	tp := keyPartitioner().ForTopic("t")
	for key, h := range javaMurmur2 {
		for n := 1; n <= 17; n++ {
			want := int(h&0x7fffffff) % n
			if got := tp.Partition(&kgo.Record{Key: []byte(key)}, n); got != want {
				t.Errorf("key %q over %d partitions: got %d, want %d (Java)", key, n, got, want)
			}
		}
	}
}

func TestProducerOpts(t *testing.T) {
	for _, tc := range []struct {
		flags    produceFlags
		explicit bool
		ok       bool
	}{
		{produceFlags{acks: "all", compression: "zstd", idempotent: true, maxLineBytes: 1}, false, true},
		{produceFlags{acks: "1", compression: "lz4", idempotent: true, maxLineBytes: 1}, false, true},
		{produceFlags{acks: "leader", compression: "none", idempotent: true, maxLineBytes: 1}, true, false},
		{produceFlags{acks: "0", compression: "gzip", idempotent: false, maxLineBytes: 1}, true, true},
		{produceFlags{acks: "2", compression: "none", maxLineBytes: 1}, false, false},
		{produceFlags{acks: "all", compression: "brotli", maxLineBytes: 1}, false, false},
		{produceFlags{acks: "all", compression: "snappy", maxLineBytes: 0}, false, false},
	} {
		_, err := tc.flags.producerOpts(tc.explicit)
		if (err == nil) != tc.ok {
			t.Errorf("%+v explicit=%v: err %v, want ok=%v", tc.flags, tc.explicit, err, tc.ok)
		}
	}
}

func TestRecordFormatter(t *testing.T) {
	ts := time.UnixMilli(1764410400123)
	r := &kgo.Record{
		Topic: "t", Partition: 2, Offset: 7, Timestamp: ts,
		Key: []byte("k"), Value: []byte("v"),
		Headers: []kgo.RecordHeader{{Key: "a", Value: []byte("1")}, {Key: "bin", Value: []byte{0xff, 0}}},
	}
	format := func(name, sep string, r *kgo.Record) string {
		f, err := newRecordFormatter(name, sep)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		w := bufio.NewWriter(&b)
		if err := f(w, r); err != nil {
			t.Fatal(err)
		}
		w.Flush()
		return b.String()
	}
	if got := format("value", "\t", r); got != "v\n" {
		t.Errorf("value: %q", got)
	}
	if got := format("key-value", ":", r); got != "k:v\n" {
		t.Errorf("key-value: %q", got)
	}
	want := `{"topic":"t","partition":2,"offset":7,"timestamp":1764410400123,"key":"k","value":"v","headers":[{"key":"a","value":"1"},{"key":"bin","value":null,"value_base64":"/wA="}]}` + "\n"
	if got := format("json", "", r); got != want {
		t.Errorf("json:\n got %s\nwant %s", got, want)
	}
	null := &kgo.Record{Topic: "t", Timestamp: ts, Key: nil, Value: nil}
	want = `{"topic":"t","partition":0,"offset":0,"timestamp":1764410400123,"key":null,"value":null,"headers":[]}` + "\n"
	if got := format("json", "", null); got != want {
		t.Errorf("json with nulls:\n got %s\nwant %s", got, want)
	}
	if _, err := newRecordFormatter("xml", ""); err == nil {
		t.Error("unknown format accepted")
	}
}

func TestTopicIDLikeKafka(t *testing.T) {
	// Kafka prints Uuid 0x0123456789abcdef_fedcba9876543210 as URL-safe
	// base64 without padding.
	id := [16]byte{0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10}
	if got, want := topicID(id), "ASNFZ4mrze_-3LqYdlQyEA"; got != want {
		t.Errorf("topicID = %q, want %q", got, want)
	}
}

// TestTableTrimsPadding: columns align as with text/tabwriter, and a row
// whose last cells are empty ends without spaces.
func TestTableTrimsPadding(t *testing.T) {
	var out bytes.Buffer
	tw := newTable(&out)
	fmt.Fprintln(tw, "PARTITION\tLAST-CLEANED\tERROR")
	fmt.Fprintln(tw, "0\tnever\t")
	fmt.Fprintln(tw, "10\t2026-12-02T07:00:00Z\tdisk full")
	if err := tw.Flush(); err != nil {
		t.Fatal(err)
	}
	want := "PARTITION  LAST-CLEANED          ERROR\n" +
		"0          never\n" +
		"10         2026-12-02T07:00:00Z  disk full\n"
	if out.String() != want {
		t.Fatalf("got:\n%q\nwant:\n%q", out.String(), want)
	}
}

// TestClientTimeoutNeedsAUnit: SEDIMENT_TIMEOUT=3 is refused (viper would
// read it as 3ns and every request would time out), naming the variable.
func TestClientTimeoutNeedsAUnit(t *testing.T) {
	t.Setenv("SEDIMENT_TIMEOUT", "3")
	cmd := newRootCmd()
	cmd.SetArgs([]string{"topic", "list", "--brokers", "127.0.0.1:1"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), `SEDIMENT_TIMEOUT: "3" has no unit`) {
		t.Fatalf("err %v", err)
	}
	t.Setenv("SEDIMENT_TIMEOUT", "3s")
	cmd = newRootCmd()
	cmd.SetArgs([]string{"topic", "list", "--brokers", "127.0.0.1:1"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "cannot connect to the broker at 127.0.0.1:1") {
		t.Fatalf("with 3s: err %v", err)
	}
}

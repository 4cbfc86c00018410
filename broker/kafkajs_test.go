package broker

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkajsDir returns a directory with kafkajs 2.2.4 installed (npm, cached
// in the user cache directory). When Node.js or npm is missing or the
// package cannot be installed, the test fails in CI (CI=true, where .ci/run
// installs them) and is skipped elsewhere, as e2e's kafkajs test does.
func kafkajsDir(t *testing.T) string {
	t.Helper()
	giveUp := func(args ...any) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatal(args...)
		}
		t.Skip(args...)
	}
	if _, err := exec.LookPath("node"); err != nil {
		giveUp("Node.js not installed")
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		giveUp("no cache directory for kafkajs")
	}
	dir := filepath.Join(cache, "sediment-test", "kafkajs-2.2.4")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "kafkajs", "package.json")); err == nil {
		return dir
	}
	if _, err := exec.LookPath("npm"); err != nil {
		giveUp("npm not installed")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		giveUp(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--prefix", dir, "kafkajs@2.2.4").CombinedOutput()
	if err != nil {
		giveUp(fmt.Sprintf("cannot install kafkajs: %v\n%s", err, out))
	}
	return dir
}

// TestKafkajsTransactions runs testdata/kafkajs/ctp.js, a kafkajs
// consume-transform-produce stage, and checks that a read_committed reader
// of its output sees every input record exactly once and not the record of
// the transaction it aborted, and that the group's offsets were committed
// with the transactions.
func TestKafkajsTransactions(t *testing.T) {
	dir := kafkajsDir(t)
	b := txnTestBroker(t, "")
	createTopic(t, b, "kin", 2, nil)
	createTopic(t, b, "kout", 2, nil)
	const n = 500
	// kafkajs reads only uncompressed and gzip batches without plugins.
	plain := newClient(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchCompression(kgo.NoCompression()))
	var in []*kgo.Record
	for i := 0; i < n; i++ {
		in = append(in, &kgo.Record{Topic: "kin", Partition: int32(i % 2), Value: []byte(fmt.Sprintf("%d/%05d", i%2, i))})
	}
	produceAll(t, plain, in)

	script, err := filepath.Abs("testdata/kafkajs/ctp.js")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script, b.Addr(), fmt.Sprint(n))
	cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(dir, "node_modules"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kafkajs stage: %v\n%s", err, out)
	}

	got := consumeN(t, b, "kout", n, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	seen := map[string]int{}
	for p, recs := range got {
		prev := ""
		for _, r := range recs {
			v := string(r.Value)
			if v == "aborted" {
				t.Fatal("read_committed returned the aborted record")
			}
			if v <= prev || v[:1] != fmt.Sprint(p) {
				t.Fatalf("partition %d: %q after %q", p, v, prev)
			}
			prev = v
			seen[v]++
		}
	}
	for _, r := range in {
		if seen[string(r.Value)] != 1 {
			t.Fatalf("%s copied %d times", r.Value, seen[string(r.Value)])
		}
	}
	adm := kadm.NewClient(newClient(t, b))
	offs, err := adm.FetchOffsets(testCtx(t), "kjs-group")
	if err != nil {
		t.Fatal(err)
	}
	for p := int32(0); p < 2; p++ {
		if o, ok := offs.Lookup("kin", p); !ok || o.At != n/2 {
			t.Fatalf("committed offset of kin/%d: %+v, want %d", p, o, n/2)
		}
	}
}

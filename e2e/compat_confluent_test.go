package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// confluentPython is Debian's interpreter, which has python3-confluent-kafka
// (confluent-kafka-python 1.7.0 over librdkafka 2.0.2) when installed; a
// python3 earlier on PATH (pyenv) would not.
const confluentPython = "/usr/bin/python3"

// confluentReady checks that Debian's python3-confluent-kafka is importable.
func confluentReady(t *testing.T) string {
	t.Helper()
	return debianPythonReady(t, "confluent_kafka", "python3-confluent-kafka")
}

// debianPythonReady checks that Debian's interpreter can import module (from
// the Debian package pkg). Missing, the test is skipped locally and fails in
// CI (CI=true), where .ci/run installs it.
func debianPythonReady(t *testing.T, module, pkg string) string {
	t.Helper()
	if _, err := exec.LookPath(confluentPython); err == nil {
		if err := exec.Command(confluentPython, "-c", "import "+module).Run(); err == nil {
			return confluentPython
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s cannot import %s (Debian package %s)", confluentPython, module, pkg)
	}
	t.Skipf("%s cannot import %s (apt-get install %s)", confluentPython, module, pkg)
	return ""
}

// testConfluentEOS runs e2e/confluent/eos.py: librdkafka's exactly-once
// consume-transform-produce (transactions with send_offsets_to_transaction,
// read_committed), an aborted transaction, zombie fencing and admin calls,
// then checks its report and, independently with franz-go and kadm, the
// output log and the group's committed offsets.
func testConfluentEOS(t *testing.T, b *Broker) {
	py := confluentReady(t)
	const n = 400
	prefix := "rdk"
	r := run(t, "", nil, py, filepath.Join("confluent", "eos.py"), b.Addr, prefix, fmt.Sprint(n))
	if r.Err != nil {
		t.Fatalf("eos.py: %v\nstdout:\n%s\nstderr:\n%s", r.Err, r.Stdout, r.Stderr)
	}
	var report struct {
		Librdkafka    []any            `json:"librdkafka"`
		CleanupPolicy string           `json:"cleanupPolicy"`
		Partitions    map[string]int   `json:"partitions"`
		Produced      int              `json:"produced"`
		Copied        int              `json:"copied"`
		Transactions  int              `json:"transactions"`
		Committed     map[string]int64 `json:"committed"`
		Fenced        *struct {
			Name  string `json:"name"`
			Fatal bool   `json:"fatal"`
		} `json:"fenced"`
		Out []struct {
			P int32  `json:"p"`
			O int64  `json:"o"`
			K string `json:"k"`
			V string `json:"v"`
		} `json:"out"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &report); err != nil {
		t.Fatalf("eos.py report is not JSON: %v\n%s\nstderr:\n%s", err, r.Stdout, r.Stderr)
	}
	t.Logf("librdkafka %v: %d records copied in %d transactions", report.Librdkafka, report.Copied, report.Transactions)
	if report.CleanupPolicy != "delete" {
		t.Errorf("describe_configs cleanup.policy = %q, want delete", report.CleanupPolicy)
	}
	if report.Partitions[prefix+"-in"] != 3 || report.Partitions[prefix+"-out"] != 3 {
		t.Errorf("list_topics partitions = %v, want 3 each", report.Partitions)
	}
	if report.Produced != n || report.Copied != n {
		t.Errorf("produced %d, copied %d, want %d each", report.Produced, report.Copied, n)
	}
	if report.Fenced == nil || !report.Fenced.Fatal || !strings.Contains(report.Fenced.Name, "FENCED") && !strings.Contains(report.Fenced.Name, "EPOCH") {
		t.Errorf("the zombie producer was not fenced: %+v", report.Fenced)
	}

	want := map[string]string{}
	for i := 0; i < n; i++ {
		want[fmt.Sprintf("%s-k-%04d", prefix, i)] = fmt.Sprintf("V-%d|%d", i, i)
	}
	// What librdkafka read back, read_committed: every copy once, no decoy.
	c := newCollector()
	for _, m := range report.Out {
		c.add(m.P, m.O, m.K, m.V)
	}
	c.check(t, "confluent read_committed consumer", want)
	// The same through franz-go, read_committed; read uncommitted, the
	// aborted decoys and the fenced zombie are there but a read_committed
	// reader never saw them.
	checkTxnCopy(t, b, prefix+"-out", want, 20)
	// The offsets committed inside the transactions are the input's ends.
	checkCommitted(t, b, prefix+"-eos", prefix+"-in")
	var sum int64
	for _, o := range report.Committed {
		sum += o
	}
	if sum != n {
		t.Errorf("committed offsets per partition %v sum to %d, want %d", report.Committed, sum, n)
	}
}

package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// platformaticDir is the npm project with the @platformatic/kafka script
// (its package-lock.json pins @platformatic/kafka 1.35.0, the last 1.x
// release: 2.x needs Node.js 22, and machines here have 20).
const platformaticDir = "platformatic"

// testPlatformatic runs e2e/platformatic/run.mjs: @platformatic/kafka, a
// pure JavaScript client for Kafka 3.5 to 4.1 at current API versions:
// admin calls, an idempotent producer over four codecs, a classic and a
// KIP-848 group member each reading everything and committing, and an
// exactly-once copy in transactions with an aborted one; then checks its
// report and, with franz-go and kadm, the logs and the groups' offsets.
func testPlatformatic(t *testing.T, b *Broker) {
	node := npmProjectReady(t, platformaticDir, filepath.Join("@platformatic", "kafka"))
	const n = 300
	prefix := "plt"
	r := run(t, "", nil, node, filepath.Join(platformaticDir, "run.mjs"), b.Addr, prefix, strconv.Itoa(n))
	if r.Err != nil {
		t.Fatalf("run.mjs: %v\nstdout:\n%s\nstderr:\n%s", r.Err, r.Stdout, r.Stderr)
	}
	type rec struct {
		P int32      `json:"p"`
		O int64      `json:"o"`
		K string     `json:"k"`
		V string     `json:"v"`
		H [][]string `json:"h"`
	}
	var report struct {
		AlreadyExists string   `json:"alreadyExists"`
		Topics        []string `json:"topics"`
		Classic       []rec    `json:"classic"`
		Modern        []rec    `json:"modern"`
		Copied        int      `json:"copied"`
		Transactions  int      `json:"transactions"`
		Out           []rec    `json:"out"`
		Groups        map[string]*struct {
			State string `json:"state"`
			Type  string `json:"type"`
		} `json:"groups"`
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
		recs []rec
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
	consumeFranz(t, b, out, n, kgo.FetchIsolationLevel(kgo.ReadCommitted())).check(t, "franz-go read_committed", copies)
	all := consumeFranz(t, b, out, n+20)
	all.mu.Lock()
	decoys := 0
	for k := range all.got {
		if strings.Contains(k, "-aborted-") {
			decoys++
		}
	}
	all.mu.Unlock()
	if decoys != 20 {
		t.Errorf("read_uncommitted sees %d aborted decoys, want 20", decoys)
	}
	checkCommitted(t, b, prefix+"-eos", in)

	for g, typ := range map[string]string{prefix + "-classic": "classic", prefix + "-modern": "consumer", prefix + "-eos": "classic"} {
		if st := report.Groups[g]; st == nil || st.State != "EMPTY" || st.Type != typ {
			t.Errorf("listGroups: %s is %+v, want EMPTY %s", g, st, typ)
		}
	}
}

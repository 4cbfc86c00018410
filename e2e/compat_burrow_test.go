package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Debian's Burrow (LinkedIn's consumer lag monitor, 1.2.1 over sarama 1.22)
// and the ZooKeeper it always starts its coordinator on.
const (
	burrowBin    = "/usr/bin/Burrow"
	zookeeperJar = "/usr/share/java/zookeeper.jar"
)

// burrowReady checks for Burrow, ZooKeeper's jar and java: missing, the test
// is skipped locally and fails in CI (CI=true), where .ci/run installs them.
func burrowReady(t *testing.T) string {
	t.Helper()
	java, err := exec.LookPath("java")
	_, errB := os.Stat(burrowBin)
	_, errZ := os.Stat(zookeeperJar)
	if err == nil && errB == nil && errZ == nil {
		return java
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("Burrow needs %s, %s and java (Debian packages burrow, zookeeper): %v %v %v", burrowBin, zookeeperJar, err, errB, errZ)
	}
	t.Skipf("Burrow needs %s, %s and java (apt-get install burrow zookeeper)", burrowBin, zookeeperJar)
	return ""
}

// testBurrow runs Burrow against the broker: it reads the group's commits
// from __consumer_offsets itself (Kafka's OffsetCommit key and value
// records), takes the partitions' end offsets with ListOffsets v0 (which
// Burrow up to 1.9.3 sends whatever its kafka-version: Kafka 4.0 dropped v0,
// and such a Burrow sees no consumer at all there, linkedin/Burrow#843), and
// must report each partition's lag as the broker knows it.
func testBurrow(t *testing.T, b *Broker) {
	java := burrowReady(t)
	dir := t.TempDir()
	start := func(name string, cmd *exec.Cmd) *os.File {
		t.Helper()
		out, err := os.Create(filepath.Join(dir, name+".out"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			out.Close()
		})
		return out
	}
	dump := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		if len(b) > 8000 {
			b = b[len(b)-8000:]
		}
		return string(b)
	}

	// ZooKeeper on a port of its own.
	zkPort := freePort(t)
	zkConf := fmt.Sprintf("tickTime=2000\ndataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n",
		filepath.Join(dir, "zk"), zkPort)
	if err := os.WriteFile(filepath.Join(dir, "zoo.cfg"), []byte(zkConf), 0o644); err != nil {
		t.Fatal(err)
	}
	start("zookeeper", exec.Command(java, "-Xmx128m", "-cp", dir+":"+zookeeperJar,
		"org.apache.zookeeper.server.quorum.QuorumPeerMain", filepath.Join(dir, "zoo.cfg")))
	zkAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(zkPort))
	// Serving, not just listening: its "srvr" command (the one allowed by
	// default) tells the mode once the server runs.
	waitFor(t, 60*time.Second, "ZooKeeper to serve", func() bool {
		c, err := net.DialTimeout("tcp", zkAddr, time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte("srvr")); err != nil {
			return false
		}
		out, _ := io.ReadAll(io.LimitReader(c, 4096))
		return strings.Contains(string(out), "Mode: standalone")
	})

	// Ten records in each of three partitions; the group commits 4, 7 and
	// 10 (an offset commit with no member, as a tool or a simple consumer
	// does): lag 6, 3, 0.
	const topic, group = "burrow-orders", "burrow-billing"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := b.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(cl)
	if resp, err := adm.CreateTopic(ctx, 3, 1, nil, topic); err != nil || resp.Err != nil {
		t.Fatalf("create %s: %v %v", topic, err, resp.Err)
	}
	for p := range int32(3) {
		for i := range 10 {
			r := &kgo.Record{Topic: topic, Partition: p, Key: []byte(fmt.Sprint(i)), Value: []byte("v")}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	var offsets kadm.Offsets
	for p, o := range []int64{4, 7, 10} {
		offsets.Add(kadm.Offset{Topic: topic, Partition: int32(p), At: o, LeaderEpoch: -1})
	}
	if resp, err := adm.CommitOffsets(ctx, group, offsets); err != nil || resp.Error() != nil {
		t.Fatalf("commit offsets: %v %v", err, resp.Error())
	}

	httpPort := freePort(t)
	conf := fmt.Sprintf(`[general]
pidfile=%[1]q
[logging]
filename=%[2]q
level="info"
[zookeeper]
servers=[%[3]q]
timeout=6
root-path="/burrow"
[client-profile.sed]
client-id="burrow-sediment"
kafka-version="2.1.0"
[cluster.sediment]
class-name="kafka"
servers=[%[4]q]
client-profile="sed"
topic-refresh=5
offset-refresh=2
[consumer.sediment]
class-name="kafka"
cluster="sediment"
servers=[%[4]q]
client-profile="sed"
offsets-topic="__consumer_offsets"
start-latest=false
[httpserver.default]
address="127.0.0.1:%[5]d"
[storage.default]
class-name="inmemory"
workers=4
intervals=10
expire-group=604800
min-distance=1
[evaluator.default]
class-name="caching"
expire-cache=2
`, filepath.Join(dir, "burrow.pid"), filepath.Join(dir, "burrow.log"), zkAddr, b.Addr, httpPort)
	confDir := filepath.Join(dir, "conf")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(confDir, "burrow.toml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(burrowBin, "-config-dir", confDir)
	cmd.Dir = dir
	start("burrow", cmd)
	defer func() {
		if t.Failed() {
			t.Logf("Burrow's log:\n%s\nits output:\n%s\nZooKeeper's output:\n%s", dump("burrow.log"), dump("burrow.out"), dump("zookeeper.out"))
		}
	}()

	base := fmt.Sprintf("http://127.0.0.1:%d/v3/kafka/sediment", httpPort)
	get := func(path string, v any) error {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, base+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			return err
		}
		return json.Unmarshal(body, v)
	}
	var lag struct {
		Status struct {
			TotalLag   int64 `json:"totallag"`
			Partitions []struct {
				Partition  int32 `json:"partition"`
				CurrentLag int64 `json:"current_lag"`
				End        struct {
					Offset int64 `json:"offset"`
				} `json:"end"`
			} `json:"partitions"`
		} `json:"status"`
	}
	lags := func() []int64 {
		out := make([]int64, 3)
		for _, p := range lag.Status.Partitions {
			if p.Partition >= 0 && p.Partition < 3 {
				out[p.Partition] = p.CurrentLag
			}
		}
		return out
	}
	waitFor(t, 90*time.Second, "Burrow to report the group's lag", func() bool {
		return get("/consumer/"+group+"/lag", &lag) == nil && len(lag.Status.Partitions) == 3 &&
			lag.Status.TotalLag == 9 && slices.Equal(lags(), []int64{6, 3, 0})
	})
	var ends struct {
		Offsets []int64 `json:"offsets"`
	}
	if err := get("/topic/"+topic, &ends); err != nil || !slices.Equal(ends.Offsets, []int64{10, 10, 10}) {
		t.Errorf("Burrow's end offsets of %s: %v, %v; want [10 10 10]", topic, ends.Offsets, err)
	}
	for _, p := range lag.Status.Partitions {
		if p.Partition < 0 || p.Partition > 2 {
			t.Errorf("Burrow reports partition %d of a 3-partition topic", p.Partition)
			continue
		}
		if want := []int64{4, 7, 10}[p.Partition]; p.End.Offset != want {
			t.Errorf("Burrow's committed offset of partition %d: %d, want %d", p.Partition, p.End.Offset, want)
		}
	}
	if log := dump("burrow.log"); strings.Contains(log, "failed to fetch offsets") {
		t.Errorf("Burrow failed to fetch offsets from the broker:\n%s", log)
	}
}

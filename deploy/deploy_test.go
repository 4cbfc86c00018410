// Package deploy holds Sediment's deployment files: example configs, a
// systemd unit, a Dockerfile and docker-compose file, Kubernetes manifests.
// No Docker engine or Kubernetes cluster runs in CI, so this test reads
// them: every setting they use must be a real `sediment broker` setting
// (read from the built binary's --help), values must parse as the setting's
// type, the pieces that must agree (ports, paths, timeouts, voter lists)
// must agree, and the single-broker configs must start a real broker.
package deploy

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.yaml.in/yaml/v3"

	"github.com/sediment-io/sediment/internal/testutil"
)

// pendingKeys are settings the deployment files use that come with work not
// merged on every branch yet. A pending key missing from --help is logged,
// not failed; once the binary has it, it is checked as any other.
// None now: voters and the replica settings came with the replication
// work, merged.
var pendingKeys = map[string]string{}

// controlledShutdown is the longest a clustered broker spends moving its
// leaderships away on SIGTERM before the shutdown-timeout part begins
// (docs/replication.md).
const controlledShutdown = 10 * time.Second

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// sedimentBinary builds cmd/sediment as the Dockerfile does (CGO off).
func sedimentBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sediment-deploy-test")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "sediment")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/sediment")
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// setting is one flag of `sediment broker --help`: its name and type
// ("bool", "int", "string", "duration", ...).
type setting struct{ name, typ string }

var flagLine = regexp.MustCompile(`^\s+(?:-[a-zA-Z], )?--([a-z0-9-]+)(?: ([a-zA-Z0-9]+))?\s{2,}`)

// brokerSettings reads the settings table from the binary's help.
func brokerSettings(t *testing.T) map[string]setting {
	t.Helper()
	out, err := exec.Command(sedimentBinary(t), "broker", "--help").Output()
	if err != nil {
		t.Fatalf("sediment broker --help: %v", err)
	}
	m := map[string]setting{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		g := flagLine.FindStringSubmatch(sc.Text())
		if g == nil || g[1] == "help" {
			continue
		}
		typ := g[2]
		if typ == "" {
			typ = "bool"
		}
		m[g[1]] = setting{g[1], typ}
	}
	// The table must look like the broker's: a few settings every build has.
	for _, k := range []string{"config", "node-id", "data-dir", "listeners", "admin-address", "raft-address", "shutdown-timeout"} {
		if _, ok := m[k]; !ok {
			t.Fatalf("--help has no --%s; parsed %v from:\n%s", k, m, out)
		}
	}
	return m
}

// checker collects the settings used by one file and checks them.
type checker struct {
	t        *testing.T
	settings map[string]setting
	file     string
}

// key checks one setting name and, when value is not nil, that it parses as
// the setting's type.
func (c *checker) key(name string, value any) {
	c.t.Helper()
	s, ok := c.settings[name]
	if !ok {
		if branch, pending := pendingKeys[name]; pending {
			c.t.Logf("%s: %q is not a setting of this build (comes with %s)", c.file, name, branch)
			return
		}
		c.t.Errorf("%s: %q is not a `sediment broker` setting", c.file, name)
		return
	}
	if value == nil {
		return
	}
	str := fmt.Sprint(value)
	if strings.Contains(str, "$(") { // Kubernetes expands $(VAR) before the broker sees it
		return
	}
	var err error
	switch s.typ {
	case "bool":
		_, err = strconv.ParseBool(str)
	case "int", "int32", "int64":
		_, err = strconv.ParseInt(str, 10, 64)
	case "duration":
		_, err = time.ParseDuration(str)
	}
	if err != nil {
		c.t.Errorf("%s: %s: value %q is not a %s: %v", c.file, name, str, s.typ, err)
	}
}

// env checks environment variables: SEDIMENT_* must name a setting.
func (c *checker) env(vars map[string]any) {
	c.t.Helper()
	for k, v := range vars {
		if name, ok := strings.CutPrefix(k, "SEDIMENT_"); ok {
			c.key(strings.ReplaceAll(strings.ToLower(name), "_", "-"), v)
		}
	}
}

// args checks command-line flags (--name value or --name=value).
func (c *checker) args(args []string) {
	c.t.Helper()
	for i, a := range args {
		name, ok := strings.CutPrefix(a, "--")
		if !ok {
			continue
		}
		if n, v, eq := strings.Cut(name, "="); eq {
			c.key(n, v)
			continue
		}
		var v any
		if s, known := c.settings[name]; known && s.typ != "bool" && i+1 < len(args) {
			v = args[i+1]
		}
		c.key(name, v)
	}
}

// file checks a broker YAML config and returns it.
func (c *checker) config(raw []byte) map[string]any {
	c.t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal(raw, &m); err != nil {
		c.t.Fatalf("%s: %v", c.file, err)
	}
	if len(m) == 0 {
		c.t.Fatalf("%s: no settings", c.file)
	}
	for k, v := range m {
		c.key(k, v)
	}
	return m
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func durationOf(t *testing.T, m map[string]any, key string, def time.Duration) time.Duration {
	t.Helper()
	v, ok := m[key]
	if !ok {
		return def
	}
	d, err := time.ParseDuration(fmt.Sprint(v))
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return d
}

const defaultShutdownTimeout = 30 * time.Second

// voterList parses id@host:port,... into id -> host:port.
func voterList(t *testing.T, s string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, v := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(v), "@")
		if _, _, err := net.SplitHostPort(addr); !ok || err != nil {
			t.Fatalf("voter %q is not id@host:port", v)
		}
		out[id] = addr
	}
	return out
}

// listenerNames returns the NAME of each NAME://host:port.
func listenerNames(s string) []string {
	var names []string
	for _, l := range strings.Split(s, ",") {
		name, _, ok := strings.Cut(strings.TrimSpace(l), "://")
		if !ok {
			name = "PLAINTEXT"
		}
		names = append(names, strings.ToUpper(name))
	}
	return names
}

func TestExampleConfigs(t *testing.T) {
	settings := brokerSettings(t)
	files, err := filepath.Glob("config/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "docker/sediment.yaml")
	cluster := map[string]map[string]any{}
	for _, f := range files {
		c := &checker{t: t, settings: settings, file: f}
		m := c.config(readFile(t, f))
		if strings.HasPrefix(filepath.Base(f), "cluster-") {
			cluster[f] = m
		}
	}
	if len(cluster) != 3 {
		t.Fatalf("want three cluster-N.yaml examples, have %d", len(cluster))
	}
	// The three brokers agree on the voters, and each is the voter its
	// node-id names, at its raft-address.
	var voters string
	for f, m := range cluster {
		v := fmt.Sprint(m["voters"])
		if voters == "" {
			voters = v
		} else if v != voters {
			t.Errorf("%s: voters %q differ from %q", f, v, voters)
		}
		vl := voterList(t, v)
		id := fmt.Sprint(m["node-id"])
		if vl[id] != m["raft-address"] {
			t.Errorf("%s: node-id %s has voter address %q, raft-address is %v", f, id, vl[id], m["raft-address"])
		}
		if !strings.HasSuffix(f, "cluster-"+id+".yaml") {
			t.Errorf("%s: node-id %s", f, id)
		}
	}
}

func TestSystemdUnit(t *testing.T) {
	const f = "systemd/sediment.service"
	settings := brokerSettings(t)
	sections := map[string]map[string][]string{}
	var cur string
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, f)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			cur = strings.Trim(line, "[]")
			sections[cur] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || cur == "" {
				t.Fatalf("%s: bad line %q", f, line)
			}
			sections[cur][k] = append(sections[cur][k], v)
		}
	}
	svc := sections["Service"]
	if svc == nil || sections["Unit"] == nil || sections["Install"] == nil {
		t.Fatalf("%s: want [Unit], [Service] and [Install]; have %v", f, sections)
	}
	get := func(k string) string {
		if len(svc[k]) != 1 {
			t.Errorf("%s: want exactly one %s=, have %q", f, k, svc[k])
			return ""
		}
		return svc[k][0]
	}
	if ty := get("Type"); ty != "simple" && ty != "notify" {
		t.Errorf("Type=%s", ty)
	}
	if ks := get("KillSignal"); ks != "SIGTERM" {
		t.Errorf("KillSignal=%s, the broker shuts down gracefully on SIGTERM", ks)
	}
	if n, err := strconv.Atoi(get("LimitNOFILE")); err != nil || n < 65536 {
		t.Errorf("LimitNOFILE=%v (%v): want at least 65536", n, err)
	}
	if u := get("User"); u == "" || u == "root" || u == "0" {
		t.Errorf("User=%q: want a dedicated user", u)
	}
	if sd := get("StateDirectory"); sd != "sediment" {
		t.Errorf("StateDirectory=%q: want sediment (/var/lib/sediment)", sd)
	}
	exe := strings.Fields(get("ExecStart"))
	if len(exe) < 2 || !filepath.IsAbs(exe[0]) || exe[1] != "broker" {
		t.Fatalf("ExecStart=%q", exe)
	}
	c := &checker{t: t, settings: settings, file: f}
	c.args(exe[2:])
	for _, e := range svc["Environment"] {
		for _, kv := range strings.Fields(e) {
			k, v, _ := strings.Cut(strings.Trim(kv, `"`), "=")
			c.env(map[string]any{k: v})
		}
	}
	// The unit installs config/single.yaml: its data-dir is the state
	// directory and the stop timeout outlasts its shutdown-timeout.
	var cfgPath string
	for i, a := range exe {
		if a == "--config" && i+1 < len(exe) {
			cfgPath = exe[i+1]
		}
	}
	if cfgPath != "/etc/sediment/sediment.yaml" {
		t.Errorf("ExecStart reads %q, want /etc/sediment/sediment.yaml (deploy/config/single.yaml installed)", cfgPath)
	}
	m := (&checker{t: t, settings: settings, file: "config/single.yaml"}).config(readFile(t, "config/single.yaml"))
	if m["data-dir"] != "/var/lib/sediment" {
		t.Errorf("config/single.yaml: data-dir %v, the unit's state directory is /var/lib/sediment", m["data-dir"])
	}
	if rw := svc["ReadWritePaths"]; len(rw) > 0 && !strings.Contains(strings.Join(rw, " "), "/var/lib/sediment") {
		t.Errorf("ReadWritePaths=%q does not include /var/lib/sediment", rw)
	}
	stop, err := strconv.Atoi(get("TimeoutStopSec"))
	if err != nil {
		t.Fatalf("TimeoutStopSec: %v", err)
	}
	if need := durationOf(t, m, "shutdown-timeout", defaultShutdownTimeout) + controlledShutdown; time.Duration(stop)*time.Second <= need {
		t.Errorf("TimeoutStopSec=%d: must exceed shutdown-timeout plus controlled shutdown (%v)", stop, need)
	}
}

func TestDockerfile(t *testing.T) {
	const f = "docker/Dockerfile"
	raw := string(readFile(t, f))
	gomod := string(readFile(t, "../go.mod"))
	goVersion := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(gomod)
	if goVersion == nil {
		t.Fatal("go.mod has no go directive")
	}
	from := regexp.MustCompile(`(?m)^FROM (\S+)`).FindAllStringSubmatch(raw, -1)
	if len(from) < 2 {
		t.Fatalf("%s: want a multi-stage build, have FROM %v", f, from)
	}
	if want := "golang:" + goVersion[1]; !strings.HasPrefix(from[0][1], want) {
		t.Errorf("%s: build stage %s, go.mod wants %s", f, from[0][1], want)
	}
	if final := from[len(from)-1][1]; final != "scratch" && !strings.Contains(final, "distroless/static") {
		t.Errorf("%s: final stage %s: want a static base (scratch or distroless/static)", f, final)
	}
	if !strings.Contains(raw, "CGO_ENABLED=0 go build") {
		t.Errorf("%s: the binary must be built with CGO_ENABLED=0", f)
	}
	// Files copied from the build context (the repository root) exist.
	for _, g := range regexp.MustCompile(`(?m)^COPY (?:--chown=\S+ )?(\S+) \S+$`).FindAllStringSubmatch(raw, -1) {
		if g[1] == "." {
			continue
		}
		for _, src := range strings.Fields(g[1]) {
			if _, err := os.Stat(filepath.Join("..", src)); err != nil {
				t.Errorf("%s: COPY %s: %v", f, src, err)
			}
		}
	}
	cmd := regexp.MustCompile(`(?m)^CMD \[(.*)\]$`).FindStringSubmatch(raw)
	if cmd == nil {
		t.Fatalf("%s: no CMD", f)
	}
	var args []string
	for _, a := range strings.Split(cmd[1], ",") {
		args = append(args, strings.Trim(strings.TrimSpace(a), `"`))
	}
	(&checker{t: t, settings: brokerSettings(t), file: f}).args(args)

	// The binary built the same way is static: no ELF interpreter, no
	// shared libraries.
	ef, err := elf.Open(sedimentBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the CGO_ENABLED=0 binary has an ELF interpreter: not static")
		}
	}
	if libs, _ := ef.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the CGO_ENABLED=0 binary needs %v", libs)
	}
}

// dockerHealthcheck is the command of the Dockerfile's HEALTHCHECK, which
// must be the image's binary asking its admin endpoint.
func dockerHealthcheck(t *testing.T) []string {
	t.Helper()
	const f = "docker/Dockerfile"
	raw := strings.ReplaceAll(string(readFile(t, f)), "\\\n", " ")
	m := regexp.MustCompile(`(?m)^HEALTHCHECK .*CMD \[(.*)\]$`).FindStringSubmatch(raw)
	if m == nil {
		t.Fatalf("%s: no HEALTHCHECK CMD [...]", f)
	}
	var args []string
	for _, a := range strings.Split(m[1], ",") {
		args = append(args, strings.Trim(strings.TrimSpace(a), `"`))
	}
	if len(args) < 3 || args[0] != "/usr/local/bin/sediment" || args[1] != "health" || !slices.Contains(args, "--admin-address") {
		t.Fatalf("%s: HEALTHCHECK %q: want /usr/local/bin/sediment health ... --admin-address", f, args)
	}
	return args
}

func TestCompose(t *testing.T) {
	const f = "docker-compose.yml"
	settings := brokerSettings(t)
	var doc struct {
		Services map[string]struct {
			Build *struct {
				Context    string `yaml:"context"`
				Dockerfile string `yaml:"dockerfile"`
			} `yaml:"build"`
			Image           string            `yaml:"image"`
			Command         any               `yaml:"command"`
			Environment     map[string]string `yaml:"environment"`
			StopGracePeriod string            `yaml:"stop_grace_period"`
			Ports           []string          `yaml:"ports"`
			Volumes         []string          `yaml:"volumes"`
			Hostname        string            `yaml:"hostname"`
			DependsOn       map[string]any    `yaml:"depends_on"`
			Ulimits         map[string]any    `yaml:"ulimits"`
			Healthcheck     map[string]any    `yaml:"healthcheck"`
			Entrypoint      any               `yaml:"entrypoint"`
			Restart         string            `yaml:"restart"`
			ContainerName   string            `yaml:"container_name"`
			Extra           map[string]any    `yaml:",inline"`
		} `yaml:"services"`
		Volumes map[string]any `yaml:"volumes"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, f)))
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("%s: %v", f, err)
	}
	var brokers []string
	minio := false
	for name, s := range doc.Services {
		if len(s.Extra) > 0 {
			t.Errorf("%s: service %s: keys this test does not know: %v", f, name, s.Extra)
		}
		for _, v := range s.Volumes {
			vol, _, _ := strings.Cut(v, ":")
			if _, ok := doc.Volumes[vol]; !ok && !strings.HasPrefix(vol, ".") && !strings.HasPrefix(vol, "/") {
				t.Errorf("%s: service %s uses undeclared volume %s", f, name, vol)
			}
		}
		for dep := range s.DependsOn {
			if _, ok := doc.Services[dep]; !ok {
				t.Errorf("%s: %s depends on unknown service %s", f, name, dep)
			}
		}
		if strings.HasPrefix(s.Image, "minio/minio") {
			minio = true
		}
		if s.Build == nil {
			continue
		}
		brokers = append(brokers, name)
		if _, err := os.Stat(filepath.Join(s.Build.Context, s.Build.Dockerfile)); err != nil {
			t.Errorf("%s: %s: dockerfile: %v", f, name, err)
		}
		c := &checker{t: t, settings: settings, file: f + ": " + name}
		env := map[string]any{}
		for k, v := range s.Environment {
			env[k] = v
		}
		c.env(env)
		if args, ok := s.Command.([]any); ok {
			var ss []string
			for _, a := range args {
				ss = append(ss, fmt.Sprint(a))
			}
			c.args(ss)
		}
		// Agreement: the node is the voter at its raft address; the
		// inter-broker listener (the first) is advertised at the host
		// name; Docker waits longer than the broker's shutdown.
		vl := voterList(t, s.Environment["SEDIMENT_VOTERS"])
		if vl[s.Environment["SEDIMENT_NODE_ID"]] != s.Environment["SEDIMENT_RAFT_ADDRESS"] {
			t.Errorf("%s: node %s is voter %q, raft address %q", name, s.Environment["SEDIMENT_NODE_ID"],
				vl[s.Environment["SEDIMENT_NODE_ID"]], s.Environment["SEDIMENT_RAFT_ADDRESS"])
		}
		ln, adv := listenerNames(s.Environment["SEDIMENT_LISTENERS"]), s.Environment["SEDIMENT_ADVERTISED_LISTENERS"]
		if !strings.HasPrefix(adv, ln[0]+"://"+s.Hostname+":") {
			t.Errorf("%s: first listener %s must be advertised at %s, have %q", name, ln[0], s.Hostname, adv)
		}
		// The health check is the binary's own (distroless has no
		// curl), against this broker's admin port.
		hc, _ := s.Healthcheck["test"].([]any)
		var hcArgs []string
		for _, a := range hc {
			hcArgs = append(hcArgs, fmt.Sprint(a))
		}
		_, adminPort, _ := net.SplitHostPort(s.Environment["SEDIMENT_ADMIN_ADDRESS"])
		if len(hcArgs) < 3 || hcArgs[0] != "CMD" || hcArgs[1] != "/usr/local/bin/sediment" || hcArgs[2] != "health" ||
			!slices.Contains(hcArgs, "127.0.0.1:"+adminPort) {
			t.Errorf("%s: healthcheck %q: want [CMD, /usr/local/bin/sediment, health, ... --admin-address 127.0.0.1:%s]", name, hcArgs, adminPort)
		}
		grace, err := time.ParseDuration(s.StopGracePeriod)
		shutdown, err2 := time.ParseDuration(s.Environment["SEDIMENT_SHUTDOWN_TIMEOUT"])
		if err != nil || err2 != nil || grace <= shutdown+controlledShutdown {
			t.Errorf("%s: stop_grace_period %q must exceed shutdown timeout %q + %v (%v, %v)", name, s.StopGracePeriod,
				s.Environment["SEDIMENT_SHUTDOWN_TIMEOUT"], controlledShutdown, err, err2)
		}
	}
	if len(brokers) != 3 || !minio {
		t.Errorf("%s: want three brokers and MinIO, have brokers %v, minio %v", f, brokers, minio)
	}
}

// k8sObject is the part of a manifest this test reads.
type k8sObject struct {
	Kind     string                `yaml:"kind"`
	Metadata struct{ Name string } `yaml:"metadata"`
	Data     map[string]string     `yaml:"data"`
	Spec     yaml.Node             `yaml:"spec"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

type statefulSet struct {
	ServiceName         string `yaml:"serviceName"`
	Replicas            int    `yaml:"replicas"`
	PodManagementPolicy string `yaml:"podManagementPolicy"`
	Template            struct {
		Spec struct {
			TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
			Containers                    []struct {
				Name string   `yaml:"name"`
				Args []string `yaml:"args"`
				Env  []struct {
					Name  string `yaml:"name"`
					Value string `yaml:"value"`
				} `yaml:"env"`
				Ports []struct {
					Name          string `yaml:"name"`
					ContainerPort int    `yaml:"containerPort"`
				} `yaml:"ports"`
				StartupProbe   *probe `yaml:"startupProbe"`
				ReadinessProbe *probe `yaml:"readinessProbe"`
				LivenessProbe  *probe `yaml:"livenessProbe"`
				VolumeMounts   []struct {
					Name      string `yaml:"name"`
					MountPath string `yaml:"mountPath"`
				} `yaml:"volumeMounts"`
			} `yaml:"containers"`
			Volumes []struct {
				Name      string `yaml:"name"`
				ConfigMap *struct {
					Name string `yaml:"name"`
				} `yaml:"configMap"`
			} `yaml:"volumes"`
		} `yaml:"spec"`
	} `yaml:"template"`
	VolumeClaimTemplates []struct {
		Metadata struct{ Name string } `yaml:"metadata"`
	} `yaml:"volumeClaimTemplates"`
}

func TestKubernetes(t *testing.T) {
	const f = "kubernetes/sediment.yaml"
	settings := brokerSettings(t)
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, f)))
	objs := map[string]k8sObject{}
	for {
		var o k8sObject
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if o.Kind == "" || o.Metadata.Name == "" {
			t.Fatalf("%s: a document without kind or name", f)
		}
		objs[o.Kind+"/"+o.Metadata.Name] = o
	}
	stsObj, ok := objs["StatefulSet/sediment"]
	if !ok {
		t.Fatalf("%s: no StatefulSet/sediment; have %v", f, objs)
	}
	var sts statefulSet
	if err := stsObj.Spec.Decode(&sts); err != nil {
		t.Fatal(err)
	}
	var svc struct {
		ClusterIP                string `yaml:"clusterIP"`
		PublishNotReadyAddresses bool   `yaml:"publishNotReadyAddresses"`
	}
	headless, ok := objs["Service/"+sts.ServiceName]
	if !ok {
		t.Fatalf("serviceName %q: no such Service", sts.ServiceName)
	}
	if err := headless.Spec.Decode(&svc); err != nil {
		t.Fatal(err)
	}
	if svc.ClusterIP != "None" || !svc.PublishNotReadyAddresses {
		t.Errorf("Service %s: want clusterIP None and publishNotReadyAddresses (voters find each other before ready), have %+v", sts.ServiceName, svc)
	}
	if sts.PodManagementPolicy != "Parallel" {
		t.Errorf("podManagementPolicy %q: brokers become ready only with a quorum, ordered start-up would wait for ever", sts.PodManagementPolicy)
	}
	spec := sts.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("want one container, have %d", len(spec.Containers))
	}
	ctr := spec.Containers[0]

	// The config file: the ConfigMap mounted where --config points.
	c := &checker{t: t, settings: settings, file: f}
	c.args(ctr.Args)
	var cfgPath string
	for i, a := range ctr.Args {
		if a == "--config" && i+1 < len(ctr.Args) {
			cfgPath = ctr.Args[i+1]
		}
	}
	var cm k8sObject
	for _, v := range spec.Volumes {
		if v.ConfigMap == nil {
			continue
		}
		for _, vm := range ctr.VolumeMounts {
			if vm.Name == v.Name && filepath.Dir(cfgPath) == vm.MountPath {
				cm = objs["ConfigMap/"+v.ConfigMap.Name]
			}
		}
	}
	raw, ok := cm.Data[filepath.Base(cfgPath)]
	if !ok {
		t.Fatalf("--config %q is not a key of a ConfigMap mounted at its directory", cfgPath)
	}
	cfg := (&checker{t: t, settings: settings, file: f + ": ConfigMap"}).config([]byte(raw))
	env := map[string]any{}
	for _, e := range ctr.Env {
		if e.Value == "" { // valueFrom: filled in by Kubernetes
			env[e.Name] = nil
		} else {
			env[e.Name] = e.Value
		}
	}
	c.env(env)
	if _, ok := env["SEDIMENT_NODE_ID"]; !ok {
		t.Errorf("no per-pod SEDIMENT_NODE_ID")
	}

	// The data directory is the claim's mount.
	claims := map[string]bool{}
	for _, vct := range sts.VolumeClaimTemplates {
		claims[vct.Metadata.Name] = true
	}
	mounted := false
	for _, vm := range ctr.VolumeMounts {
		if claims[vm.Name] && vm.MountPath == cfg["data-dir"] {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("data-dir %v is not the mount of a volumeClaimTemplate", cfg["data-dir"])
	}

	// Probes hit /healthz (/readyz for readiness) on the admin address's port.
	_, adminPort, err := net.SplitHostPort(fmt.Sprint(cfg["admin-address"]))
	if err != nil || strings.HasPrefix(fmt.Sprint(cfg["admin-address"]), "127.") {
		t.Fatalf("admin-address %v must listen beyond loopback for the probes (%v)", cfg["admin-address"], err)
	}
	ports := map[string]int{}
	for _, p := range ctr.Ports {
		ports[p.Name] = p.ContainerPort
	}
	wantPath := map[string]string{"startup": "/healthz", "readiness": "/readyz", "liveness": "/healthz"}
	for name, p := range map[string]*probe{"startup": ctr.StartupProbe, "readiness": ctr.ReadinessProbe, "liveness": ctr.LivenessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("no %s probe", name)
			continue
		}
		port := fmt.Sprint(p.HTTPGet.Port)
		if n, ok := ports[port]; ok {
			port = strconv.Itoa(n)
		}
		if p.HTTPGet.Path != wantPath[name] || port != adminPort {
			t.Errorf("%s probe: %s on port %s, want %s on the admin port %s", name, p.HTTPGet.Path, port, wantPath[name], adminPort)
		}
	}

	// One voter per replica, at the pods' stable names, ids as the pod index.
	vl := voterList(t, fmt.Sprint(cfg["voters"]))
	if len(vl) != sts.Replicas {
		t.Errorf("%d voters for %d replicas", len(vl), sts.Replicas)
	}
	for i := 0; i < sts.Replicas; i++ {
		want := fmt.Sprintf("%s-%d.%s:", stsObj.Metadata.Name, i, sts.ServiceName)
		if !strings.HasPrefix(vl[strconv.Itoa(i)], want) {
			t.Errorf("voter %d is %q, want %s...", i, vl[strconv.Itoa(i)], want)
		}
	}
	if grace := time.Duration(spec.TerminationGracePeriodSeconds) * time.Second; grace <= durationOf(t, cfg, "shutdown-timeout", defaultShutdownTimeout)+controlledShutdown {
		t.Errorf("terminationGracePeriodSeconds %d does not outlast the broker's shutdown", spec.TerminationGracePeriodSeconds)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// broker is a started `sediment broker` process.
type broker struct {
	cmd    *exec.Cmd
	kafka  string
	admin  string
	out    *lockedBuffer
	exited chan struct{} // closed once Wait returned
	err    error         // Wait's result, read after exited is closed
}

// lockedBuffer collects the process's output, which exec copies in a
// goroutine of its own while the test may print it.
type lockedBuffer = testutil.Buffer

// startBroker runs the binary with a config file, moved to free local ports
// and dataDir through SEDIMENT_* variables (which override the file).
func startBroker(t *testing.T, config, dataDir string) *broker {
	t.Helper()
	b := &broker{kafka: freeAddr(t), admin: freeAddr(t), out: &lockedBuffer{}, exited: make(chan struct{})}
	b.cmd = exec.Command(sedimentBinary(t), "broker", "--config", config)
	b.cmd.Env = append(os.Environ(),
		"SEDIMENT_LISTENERS=PLAINTEXT://"+b.kafka,
		"SEDIMENT_ADVERTISED_LISTENERS=PLAINTEXT://"+b.kafka,
		"SEDIMENT_ADMIN_ADDRESS="+b.admin,
		"SEDIMENT_RAFT_ADDRESS="+freeAddr(t),
		"SEDIMENT_DATA_DIR="+dataDir,
	)
	b.cmd.Stdout, b.cmd.Stderr = b.out, b.out
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { b.err = b.cmd.Wait(); close(b.exited) }()
	t.Cleanup(func() {
		select {
		case <-b.exited:
		default:
			b.cmd.Process.Kill()
			<-b.exited
		}
	})
	return b
}

// stop sends SIGTERM and waits for a clean exit.
func (b *broker) stop(t *testing.T, within time.Duration) {
	t.Helper()
	b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
		if b.err != nil {
			t.Fatalf("broker exited with %v after SIGTERM:\n%s", b.err, b.out)
		}
	case <-time.After(within):
		t.Fatalf("broker still running %v after SIGTERM:\n%s", within, b.out)
	}
}

// waitReady polls ApiVersions (kadm), /healthz and /readyz?caught-up until
// all answer.
func (b *broker) waitReady(t *testing.T, adm *kadm.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		select {
		case <-b.exited:
			t.Fatalf("broker exited (%v) before answering:\n%s", b.err, b.out)
		case <-ctx.Done():
			t.Fatalf("broker not ready: %v\n%s", last, b.out)
		case <-tick.C:
		}
		vs, err := adm.ApiVersions(ctx)
		if err == nil {
			for _, v := range vs {
				if v.Err != nil {
					err = v.Err
				}
			}
		}
		if err == nil {
			var resp *http.Response
			if resp, err = http.Get("http://" + b.admin + "/healthz"); err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "ok" {
					err = fmt.Errorf("/healthz: %s %q", resp.Status, body)
				}
			}
		}
		if err == nil {
			var resp *http.Response
			if resp, err = http.Get("http://" + b.admin + "/readyz?caught-up"); err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"ready":true`) {
					err = fmt.Errorf("/readyz: %s %q", resp.Status, body)
				}
			}
		}
		if err == nil {
			return
		}
		last = err
	}
}

// TestSingleBrokerStarts runs the single-broker examples for real: the
// broker answers ApiVersions and /healthz, creates a topic, stops cleanly
// on SIGTERM within the stop timeout, and has the topic after a restart.
func TestSingleBrokerStarts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts broker processes")
	}
	for _, config := range []string{"config/single.yaml", "docker/sediment.yaml"} {
		t.Run(filepath.Base(filepath.Dir(config)), func(t *testing.T) {
			m := (&checker{t: t, settings: brokerSettings(t), file: config}).config(readFile(t, config))
			stopWithin := durationOf(t, m, "shutdown-timeout", defaultShutdownTimeout) + controlledShutdown
			dataDir := t.TempDir()
			topic := "deploy-check"

			b := startBroker(t, config, dataDir)
			cl, err := kgo.NewClient(kgo.SeedBrokers(b.kafka))
			if err != nil {
				t.Fatal(err)
			}
			adm := kadm.NewClient(cl)
			b.waitReady(t, adm)
			if config == "docker/sediment.yaml" {
				// The image's HEALTHCHECK, at this broker's admin port.
				args := dockerHealthcheck(t)
				for i := range args[:len(args)-1] {
					if args[i] == "--admin-address" {
						args[i+1] = b.admin
					}
				}
				if out, err := exec.Command(sedimentBinary(t), args[1:]...).CombinedOutput(); err != nil {
					t.Errorf("the Dockerfile's HEALTHCHECK %q on a ready broker: %v\n%s", args, err, out)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := adm.CreateTopic(ctx, 2, 1, nil, topic); err != nil {
				t.Fatalf("create topic: %v", err)
			}
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("kept")}).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
			cl.Close()
			b.stop(t, stopWithin)

			b = startBroker(t, config, dataDir)
			cl, err = kgo.NewClient(kgo.SeedBrokers(b.kafka))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			adm = kadm.NewClient(cl)
			b.waitReady(t, adm)
			// A deadline of its own: the first one also covered the
			// stop and the restart, which a loaded machine makes slow.
			ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			td, err := adm.ListTopics(ctx, topic)
			if err != nil || td[topic].Err != nil || len(td[topic].Partitions) != 2 {
				t.Fatalf("after restart: %v %+v", err, td[topic])
			}
			ends, err := adm.ListEndOffsets(ctx, topic)
			if err != nil {
				t.Fatal(err)
			}
			var total int64
			ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
			if total != 1 {
				t.Fatalf("after restart the topic has %d records, want 1", total)
			}
			b.stop(t, stopWithin)
		})
	}
}

package testutil

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// KDC is a real MIT Kerberos KDC (Debian's krb5-kdc) for one test realm,
// on a loopback port, with its database in a temporary directory; it is
// stopped when the test ends.
type KDC struct {
	Realm string
	Addr  string // host:port, TCP and UDP
	// Krb5Conf is a krb5.conf naming the realm and this KDC: give it to
	// clients as KRB5_CONFIG.
	Krb5Conf string
	dir      string
	env      []string
}

// StartKDC creates realm SEDIMENT.TEST and starts krb5kdc. It fails the
// test when the MIT tools are missing (.ci/run installs them).
func StartKDC(t testing.TB) *KDC {
	t.Helper()
	for _, tool := range []string{"krb5kdc", "kdb5_util", "kadmin.local"} {
		if _, err := lookTool(tool); err != nil {
			t.Fatalf("%s is not installed (apt-get install krb5-kdc krb5-admin-server krb5-user, or run .ci/run): %v", tool, err)
		}
	}
	dir := t.TempDir()
	port := freeLoopbackPort(t)
	k := &KDC{Realm: "SEDIMENT.TEST", Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir}
	k.Krb5Conf = filepath.Join(dir, "krb5.conf")
	kdcConf := filepath.Join(dir, "kdc.conf")
	write := func(path, s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(k.Krb5Conf, fmt.Sprintf(`[libdefaults]
  default_realm = %[1]s
  dns_lookup_kdc = false
  dns_lookup_realm = false
  rdns = false
  udp_preference_limit = 1
  ticket_lifetime = 1h
[realms]
  %[1]s = {
    kdc = %[2]s
  }
`, k.Realm, k.Addr))
	write(kdcConf, fmt.Sprintf(`[kdcdefaults]
  kdc_listen = %[2]d
  kdc_tcp_listen = %[2]d
[realms]
  %[1]s = {
    database_name = %[3]s/principal
    key_stash_file = %[3]s/stash
    acl_file = %[3]s/kadm5.acl
    kdc_listen = 127.0.0.1:%[2]d
    kdc_tcp_listen = 127.0.0.1:%[2]d
    max_life = 1h
  }
[logging]
  kdc = FILE:%[3]s/kdc.log
`, k.Realm, port, dir))
	k.env = append(os.Environ(), "KRB5_CONFIG="+k.Krb5Conf, "KRB5_KDC_PROFILE="+kdcConf)
	k.run(t, "", "kdb5_util", "create", "-s", "-r", k.Realm, "-P", "test-master-password")
	ctx, cancel := context.WithCancel(context.Background())
	kdc, _ := lookTool("krb5kdc")
	cmd := exec.CommandContext(ctx, kdc, "-n", "-r", k.Realm)
	cmd.Env = k.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("krb5kdc: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "kdc.log"))
			t.Logf("krb5kdc output:\n%s\nkdc.log:\n%s", out.String(), log)
		}
	})
	WaitFor(t, 30*time.Second, "krb5kdc listening on "+k.Addr, func() bool {
		c, err := net.DialTimeout("tcp", k.Addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return k
}

// AddUser adds principal name@REALM with a password.
func (k *KDC) AddUser(t testing.TB, name, password string) {
	t.Helper()
	k.run(t, "", "kadmin.local", "-r", k.Realm, "-q", fmt.Sprintf("addprinc -pw %s %s", password, name))
}

// AddService adds principals (say kafka/localhost, kafka/127.0.0.1) with
// random keys and writes them to a new keytab, whose path is returned.
func (k *KDC) AddService(t testing.TB, names ...string) string {
	t.Helper()
	kt := filepath.Join(k.dir, "service-"+strconv.FormatInt(time.Now().UnixNano(), 36)+".keytab")
	for _, name := range names {
		k.run(t, "", "kadmin.local", "-r", k.Realm, "-q", "addprinc -randkey "+name)
		k.run(t, "", "kadmin.local", "-r", k.Realm, "-q", fmt.Sprintf("ktadd -k %s %s", kt, name))
	}
	return kt
}

// Env is the environment for a Kerberos client of this realm: KRB5_CONFIG,
// and KRB5CCNAME, a credential cache of the test's own.
func (k *KDC) Env(ccache string) []string {
	return []string{"KRB5_CONFIG=" + k.Krb5Conf, "KRB5CCNAME=FILE:" + ccache}
}

func (k *KDC) run(t testing.TB, stdin, tool string, args ...string) {
	t.Helper()
	p, err := lookTool(tool)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, p, args...)
	cmd.Env = k.env
	cmd.Stdin = bytes.NewBufferString(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", tool, args, err, out)
	}
}

// lookTool finds a tool on PATH or in /usr/sbin (where Debian puts the
// KDC's, outside a user's PATH).
func lookTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	p := filepath.Join("/usr/sbin", name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s not found on PATH or in /usr/sbin", name)
	}
	return p, nil
}

func freeLoopbackPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestLoadKrb5Conf: a krb5.conf with a Kerberos 4 directive in a realm (as
// older MIT installations have) is read with that directive ignored, as
// MIT's tools do; a file that is not Kerberos configuration is refused.
func TestLoadKrb5Conf(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "krb5.conf")
	os.WriteFile(good, []byte(`[libdefaults]
  default_realm = EXAMPLE.COM
[realms]
  EXAMPLE.COM = {
    kdc = kdc.example.com:88
    v4_instance_convert = {
      mit = mit.edu
    }
  }
`), 0o644)
	c, err := loadKrb5Conf(good, nil)
	if err != nil {
		t.Fatalf("a v4 directive: %v", err)
	}
	if c.LibDefaults.DefaultRealm != "EXAMPLE.COM" || len(c.Realms) != 1 || len(c.Realms[0].KDC) != 1 {
		t.Errorf("read %+v %+v", c.LibDefaults.DefaultRealm, c.Realms)
	}
	bad := filepath.Join(dir, "bad.conf")
	os.WriteFile(bad, []byte("[libdefaults]\n  verify_ap_req_nofail = maybe\n"), 0o644)
	if _, err := loadKrb5Conf(bad, nil); err == nil {
		t.Error("a broken file was accepted")
	}
	if _, err := loadKrb5Conf(filepath.Join(dir, "missing.conf"), nil); err == nil {
		t.Error("a missing file was accepted")
	}
}

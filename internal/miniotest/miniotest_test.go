package miniotest_test

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/sediment-io/sediment/internal/miniotest"
)

func TestMain(m *testing.M) { os.Exit(miniotest.Main(m)) }

func TestSharedServer(t *testing.T) {
	srv := miniotest.Shared(t)
	if srv2 := miniotest.Shared(t); srv2 != srv {
		t.Fatal("Shared started a second server")
	}
	bucket := srv.NewBucket(t)
	ctx := t.Context()
	if _, err := srv.Client.PutObject(ctx, bucket, "k", bytes.NewReader([]byte("v")), 1, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	obj, err := srv.Client.GetObject(ctx, bucket, "k", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(obj)
	if err != nil || string(got) != "v" {
		t.Fatalf("got %q, %v", got, err)
	}
	if other := srv.NewBucket(t); other == bucket {
		t.Fatal("NewBucket returned the same name twice")
	}
}

func TestStartStop(t *testing.T) {
	if _, err := miniotest.Binary(); err != nil {
		if miniotest.InCI() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	srv, err := miniotest.StartServer(miniotest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(srv.Endpoint + "/minio/health/live")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("live: %d", resp.StatusCode)
	}
	dir := srv.Dir
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(srv.Endpoint + "/minio/health/live"); err == nil {
		t.Fatal("server still answers after Stop")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("data folder %s left behind: %v", dir, err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

func TestStartMissingBinary(t *testing.T) {
	_, err := miniotest.StartServer(miniotest.Options{Binary: "/nonexistent/minio"})
	if err == nil || !strings.Contains(err.Error(), "starting") {
		t.Fatalf("StartServer with a missing binary = %v", err)
	}
}

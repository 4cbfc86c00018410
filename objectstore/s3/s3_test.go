package s3_test

import (
	"errors"
	"os"
	"testing"

	"github.com/sediment-io/sediment/internal/miniotest"
	"github.com/sediment-io/sediment/objectstore"
	"github.com/sediment-io/sediment/objectstore/objectstoretest"
	"github.com/sediment-io/sediment/objectstore/s3"
)

func TestMain(m *testing.M) { os.Exit(miniotest.Main(m)) }

// open returns a Store on a new bucket of the shared MinIO server.
func open(t *testing.T, srv *miniotest.Server, mod func(*s3.Config)) (*s3.Store, string) {
	t.Helper()
	bucket := srv.NewBucket(t)
	cfg := s3.Config{
		Bucket:          bucket,
		Endpoint:        srv.Endpoint,
		Region:          miniotest.Region,
		PathStyle:       true,
		AccessKeyID:     srv.AccessKey,
		SecretAccessKey: srv.SecretKey,
		PartSize:        5 << 20,
		BaseBackoff:     5e6, // 5ms: tests inject many faults
		MaxBackoff:      50e6,
	}
	if mod != nil {
		mod(&cfg)
	}
	s, err := s3.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, bucket
}

func TestConformance(t *testing.T) {
	srv := miniotest.Shared(t)
	objectstoretest.Run(t, func(t *testing.T) objectstore.Store {
		s, _ := open(t, srv, nil)
		return s
	}, objectstoretest.Options{
		LargeSize: 11 << 20, // three parts of 5 MiB
		// MinIO refuses "p/q/r" below the object "p/q" but accepts "p"
		// above it; AWS S3 accepts both.
		AllowPrefixConflict: true,
	})
}

func TestConformanceWithPrefix(t *testing.T) {
	srv := miniotest.Shared(t)
	objectstoretest.Run(t, func(t *testing.T) objectstore.Store {
		s, _ := open(t, srv, func(c *s3.Config) { c.Prefix = "cluster-a/" })
		return s
	}, objectstoretest.Options{AllowPrefixConflict: true})
}

// TestWrongSecretIsAccessDenied: a request refused for its credentials
// (MinIO's SignatureDoesNotMatch, 403) wraps objectstore.ErrAccessDenied, so
// that tiering can say it will not pass by itself.
func TestWrongSecretIsAccessDenied(t *testing.T) {
	srv := miniotest.Shared(t)
	s, _ := open(t, srv, func(c *s3.Config) { c.SecretAccessKey = "not-the-secret"; c.MaxAttempts = 1 })
	defer s.Close()
	_, err := s.Head(t.Context(), "any")
	if !errors.Is(err, objectstore.ErrAccessDenied) {
		t.Fatalf("Head with a wrong secret: %v, want ErrAccessDenied", err)
	}
	if errors.Is(err, objectstore.ErrUnavailable) || objectstore.IsNotExist(err) {
		t.Fatalf("Head with a wrong secret: %v, classified as transient or missing", err)
	}
}

package tiering

import (
	"bytes"
	"context"
	"io"
	"os"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/sediment-io/sediment/internal/miniotest"
	"github.com/sediment-io/sediment/objectstore/s3"
)

func TestMain(m *testing.M) { os.Exit(miniotest.Main(m)) }

func minioStore(t testing.TB) (*s3.Store, *miniotest.Server, string) {
	srv := miniotest.Shared(t)
	bucket := srv.NewBucket(t)
	s, err := s3.New(context.Background(), s3.Config{Bucket: bucket, Endpoint: srv.Endpoint, Region: miniotest.Region,
		PathStyle: true, AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey, MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, srv, bucket
}

// TestRoundTripMinIO runs the round trip against a real MinIO server and
// checks with minio-go, the independent client, that every object the
// manifest names is in the bucket with the bytes the local log held.
func TestRoundTripMinIO(t *testing.T) {
	store, srv, bucket := minioStore(t)
	e := newEnv(t, envOptions{store: store, cfg: localOnlyTail(20 << 10)})
	roundTrip(t, e)
	m := assertManifestMatchesBucket(t, e)
	ctx := context.Background()
	var all []byte
	for _, s := range m.Segments {
		obj, err := srv.Client.GetObject(ctx, bucket, s.Stem+SuffixLog, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(obj)
		obj.Close()
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	if want := e.stampedFrom(0); len(all) == 0 || !bytes.Equal(all, want[:len(all)]) {
		t.Fatal("minio-go reads different segment bytes")
	}
	// Every key in the bucket parses and starts with its partition hash.
	for info := range srv.Client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
		if info.Err != nil {
			t.Fatal(info.Err)
		}
		if k, err := ParseKey(info.Key); err != nil {
			if _, derr := ReadDescriptor(ctx, store, info.Key); derr != nil {
				t.Fatalf("key %s: %v", info.Key, err)
			}
		} else if k.TopicID != testTP.TopicID || k.Partition != testTP.Partition {
			t.Fatalf("key %s names another partition", info.Key)
		}
	}
}

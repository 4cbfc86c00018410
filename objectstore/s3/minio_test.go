package s3_test

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/sediment-io/sediment/internal/miniotest"
	"github.com/sediment-io/sediment/internal/testutil"
	"github.com/sediment-io/sediment/objectstore"
	"github.com/sediment-io/sediment/objectstore/faulty"
	"github.com/sediment-io/sediment/objectstore/objectstoretest"
	"github.com/sediment-io/sediment/objectstore/s3"
)

type syncBuffer = testutil.Buffer

func crc32c(b []byte) string {
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// minioGet reads an object with minio-go, the independent client.
func minioGet(t *testing.T, srv *miniotest.Server, bucket, key string) []byte {
	t.Helper()
	obj, err := srv.Client.GetObject(t.Context(), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	b, err := io.ReadAll(obj)
	if err != nil {
		t.Fatalf("minio-go read %s: %v", key, err)
	}
	return b
}

func minioStat(t *testing.T, srv *miniotest.Server, bucket, key string) minio.ObjectInfo {
	t.Helper()
	info, err := srv.Client.StatObject(t.Context(), bucket, key, minio.StatObjectOptions{Checksum: true})
	if err != nil {
		t.Fatalf("minio-go stat %s: %v", key, err)
	}
	return info
}

// What the backend writes, minio-go reads back byte for byte, with the
// CRC32C the backend sent recorded by the server.
func TestWrittenObjectsSeenByMinioGo(t *testing.T) {
	srv := miniotest.Shared(t)
	s, bucket := open(t, srv, nil)
	ctx := t.Context()
	small := objectstoretest.Data(1, 100_000)
	if err := objectstore.PutBytes(ctx, s, "topic/0/small", small, objectstore.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := minioGet(t, srv, bucket, "topic/0/small"); !bytes.Equal(got, small) {
		t.Fatal("minio-go reads other bytes")
	}
	info := minioStat(t, srv, bucket, "topic/0/small")
	if info.ChecksumCRC32C != crc32c(small) {
		t.Fatalf("stored CRC32C %q, want %q", info.ChecksumCRC32C, crc32c(small))
	}

	// A large object goes up in parts: 12 MiB in 5 MiB parts is three.
	large := objectstoretest.Data(2, 12<<20)
	w, err := s.CreateObject(ctx, "topic/0/large", objectstore.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for rest := large; len(rest) > 0; rest = rest[min(len(rest), 1<<20):] {
		if _, err := w.Write(rest[:min(len(rest), 1<<20)]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	info = minioStat(t, srv, bucket, "topic/0/large")
	if !strings.HasSuffix(strings.Trim(info.ETag, `"`), "-3") {
		t.Fatalf("ETag %q: not a three-part multipart upload", info.ETag)
	}
	if info.Size != int64(len(large)) || !strings.HasSuffix(info.ChecksumCRC32C, "-3") {
		t.Fatalf("size %d, CRC32C %q", info.Size, info.ChecksumCRC32C)
	}
	if got := minioGet(t, srv, bucket, "topic/0/large"); !bytes.Equal(got, large) {
		t.Fatal("minio-go reads other bytes for the multipart object")
	}
	// No upload left behind.
	for u := range srv.Client.ListIncompleteUploads(ctx, bucket, "", true) {
		t.Fatalf("incomplete upload left: %+v", u)
	}
}

// What minio-go writes, the backend reads, in ranges at the edges.
func TestReadsWhatMinioGoWrote(t *testing.T) {
	srv := miniotest.Shared(t)
	s, bucket := open(t, srv, nil)
	ctx := t.Context()
	data := objectstoretest.Data(3, 1<<20+3)
	if _, err := srv.Client.PutObject(ctx, bucket, "from/minio-go", bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	r, size, err := s.ReadObject(ctx, "from/minio-go")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if size != int64(len(data)) {
		t.Fatalf("size %d", size)
	}
	for _, c := range [][2]int64{{0, 1}, {size - 1, 1}, {0, size}, {1 << 20, 3}, {12345, 65536}} {
		p := make([]byte, c[1])
		if err := r.ReadAt(ctx, p, c[0]); err != nil || !bytes.Equal(p, data[c[0]:c[0]+c[1]]) {
			t.Fatalf("ReadAt(%d, %d): %v", c[0], c[1], err)
		}
	}
	if err := r.ReadAt(ctx, make([]byte, 2), size-1); !errors.Is(err, objectstore.ErrOutOfRange) {
		t.Fatalf("ReadAt past the end = %v", err)
	}
	// Replaced behind the reader's back: refused, never mixed.
	if _, err := srv.Client.PutObject(ctx, bucket, "from/minio-go", bytes.NewReader([]byte("new")), 3, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := r.ReadAt(ctx, make([]byte, 2), 0); !s.IsNotExistError(err) {
		t.Fatalf("ReadAt of a replaced object = %v, want not-exist", err)
	}
}

// List with a delimiter agrees with minio-go's listing.
func TestListAgreesWithMinioGo(t *testing.T) {
	srv := miniotest.Shared(t)
	s, bucket := open(t, srv, nil)
	ctx := t.Context()
	var keys []string
	for _, topic := range []string{"a1b2/orders", "c3d4/pay ments", "e5f6/ünï"} {
		for p := range 3 {
			for seg := range 4 {
				keys = append(keys, topic+"/"+string(rune('0'+p))+"/"+strings.Repeat("0", 15)+string(rune('0'+seg))+".log")
			}
		}
	}
	for _, k := range keys {
		if _, err := srv.Client.PutObject(ctx, bucket, k, strings.NewReader(k), int64(len(k)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, prefix := range []string{"", "a1b2/", "c3d4/pay ments/1/", "e5f6/ünï/2/0000", "zz"} {
		res, err := s.List(ctx, prefix, "/")
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for o := range srv.Client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix}) {
			if o.Err != nil {
				t.Fatal(o.Err)
			}
			want = append(want, o.Key)
		}
		var got []string
		for _, o := range res.Objects {
			got = append(got, o.Key)
		}
		got = append(got, res.Prefixes...)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("List(%q, /) = %q; minio-go lists %q", prefix, got, want)
		}
	}
	// Delete many (more than one batch would need 1000; this checks the batch call).
	if err := s.Delete(ctx, keys...); err != nil {
		t.Fatal(err)
	}
	for o := range srv.Client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
		t.Fatalf("left after Delete: %s %v", o.Key, o.Err)
	}
}

func TestDeleteManyBatches(t *testing.T) {
	srv := miniotest.Shared(t)
	s, bucket := open(t, srv, nil)
	ctx := t.Context()
	var keys []string
	for i := range 1203 {
		keys = append(keys, "many/"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+"/"+time.Duration(i).String())
	}
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	for _, k := range keys[:60] {
		if err := objectstore.PutBytes(ctx, s, k, []byte("x"), objectstore.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(ctx, keys...); err != nil { // 60 present, the rest missing: 2 batches
		t.Fatal(err)
	}
	for o := range srv.Client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
		t.Fatalf("left after Delete: %s %v", o.Key, o.Err)
	}
}

func TestAbortLeavesNoUpload(t *testing.T) {
	srv := miniotest.Shared(t)
	s, bucket := open(t, srv, nil)
	ctx := t.Context()
	w, err := s.CreateObject(ctx, "aborted/large", objectstore.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(objectstoretest.Data(4, 11<<20)); err != nil { // two parts started
		t.Fatal(err)
	}
	if err := w.Abort(); err != nil {
		t.Fatal(err)
	}
	for u := range srv.Client.ListIncompleteUploads(ctx, bucket, "", true) {
		t.Fatalf("upload left after Abort: %+v", u)
	}
	if _, err := s.Head(ctx, "aborted/large"); !s.IsNotExistError(err) {
		t.Fatalf("Head = %v", err)
	}
}

// openFaulty returns a Store whose HTTP traffic goes through a faulty
// transport.
func openFaulty(t *testing.T, srv *miniotest.Server, rules ...faulty.HTTPRule) (*s3.Store, string, *faulty.Transport) {
	var tr *faulty.Transport
	s, bucket := open(t, srv, func(c *s3.Config) {
		c.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			tr = faulty.NewTransport(rt, 1, rules...)
			return tr
		}
	})
	return s, bucket, tr
}

// The SDK's retryer, as configured, recovers from 5xx, throttling, dropped
// connections and corrupted uploads.
func TestRetriesRecover(t *testing.T) {
	srv := miniotest.Shared(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name  string
		rule  faulty.HTTPRule
		large bool // also a multipart object (slow under -race)
	}{
		{"503 SlowDown", faulty.HTTPRule{Status: 503, Times: 3}, true},
		{"500 InternalError", faulty.HTTPRule{Status: 500, Times: 3}, false},
		{"429", faulty.HTTPRule{Status: 429, Times: 2}, false},
		{"dropped connection", faulty.HTTPRule{DropConnection: true, Times: 3}, false},
		{"lost response", faulty.HTTPRule{LostResponse: true, Times: 3}, true},
		{"latency", faulty.HTTPRule{Latency: 20 * time.Millisecond, Times: 5}, false},
		{"timeout", faulty.HTTPRule{Timeout: true, Latency: 10 * time.Millisecond, Times: 3}, false},
		// Over plain HTTP the SHA-256 payload signature catches it
		// first; the CRC32C would otherwise.
		{"corrupted upload", faulty.HTTPRule{Kinds: []string{faulty.KindPutObject, faulty.KindUploadPart}, CorruptRequest: true, Times: 2}, true},
		{"truncated download", faulty.HTTPRule{Kinds: []string{faulty.KindGetObject}, TruncateBody: true, Times: 2}, true},
		{"random mix", faulty.HTTPRule{Status: 503, Probability: 0.3}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, bucket, tr := openFaulty(t, srv, tc.rule)
			sizes := []int{1000, 11 << 20}
			if !tc.large {
				sizes = sizes[:1]
			}
			for i, size := range sizes {
				data := objectstoretest.Data(uint64(i), size)
				key := "retry/" + string(rune('a'+i))
				if err := objectstore.PutBytes(ctx, s, key, data, objectstore.CreateOptions{}); err != nil {
					t.Fatalf("put %d bytes: %v", size, err)
				}
				if got := minioGet(t, srv, bucket, key); !bytes.Equal(got, data) {
					t.Fatalf("minio-go reads other bytes for %s", key)
				}
				got, err := objectstore.ReadAll(ctx, s, key, 1<<30)
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("read back: %v", err)
				}
				r, _, err := s.ReadObject(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				rc, err := r.ReadRange(ctx, 1, int64(size-2))
				if err != nil {
					t.Fatal(err)
				}
				got, err = io.ReadAll(rc)
				rc.Close()
				r.Close()
				if err != nil || !bytes.Equal(got, data[1:size-1]) {
					t.Fatalf("ReadRange: %d bytes, %v", len(got), err)
				}
			}
			if _, err := s.List(ctx, "retry/", "/"); err != nil {
				t.Fatal(err)
			}
			if err := s.Delete(ctx, "retry/a", "retry/b", "retry/c"); err != nil {
				t.Fatal(err)
			}
			if tr.Injected() == 0 {
				t.Fatal("no fault was injected")
			}
			t.Logf("%d faults in %d requests", tr.Injected(), tr.Requests())
		})
	}
}

// A conditional write whose answer was lost is retried, finds the key
// taken, and recognises its own object by size and CRC32C.
func TestNoOverwriteLostAnswer(t *testing.T) {
	srv := miniotest.Shared(t)
	ctx := t.Context()
	s, bucket, tr := openFaulty(t, srv,
		faulty.HTTPRule{Kinds: []string{faulty.KindPutObject, faulty.KindCompleteMultipartUpload}, LostResponse: true, Times: 2})
	no := objectstore.CreateOptions{NoOverwrite: true}
	small, large := objectstoretest.Data(5, 5000), objectstoretest.Data(6, 11<<20)
	if err := objectstore.PutBytes(ctx, s, "cond/small", small, no); err != nil {
		t.Fatalf("small: %v", err)
	}
	if err := objectstore.PutBytes(ctx, s, "cond/large", large, no); err != nil {
		t.Fatalf("large: %v", err)
	}
	if tr.Injected() != 2 {
		t.Fatalf("%d faults injected, want 2", tr.Injected())
	}
	if !bytes.Equal(minioGet(t, srv, bucket, "cond/small"), small) || !bytes.Equal(minioGet(t, srv, bucket, "cond/large"), large) {
		t.Fatal("wrong bytes stored")
	}
	// And another writer's different object is still refused.
	if err := objectstore.PutBytes(ctx, s, "cond/small", []byte("zombie"), no); !errors.Is(err, objectstore.ErrExists) {
		t.Fatalf("zombie = %v, want ErrExists", err)
	}
	if err := objectstore.PutBytes(ctx, s, "cond/large", objectstoretest.Data(7, 11<<20), no); !errors.Is(err, objectstore.ErrExists) {
		t.Fatalf("zombie multipart = %v, want ErrExists", err)
	}
	for u := range srv.Client.ListIncompleteUploads(ctx, bucket, "", true) {
		t.Fatalf("upload left: %+v", u)
	}
}

// A bucket that stays down gives ErrUnavailable after MaxAttempts, and
// works again when it comes back.
func TestOutage(t *testing.T) {
	srv := miniotest.Shared(t)
	ctx := t.Context()
	var logBuf syncBuffer
	var tr *faulty.Transport
	s, _ := open(t, srv, func(c *s3.Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logBuf, nil))
		c.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			tr = faulty.NewTransport(rt, 1, faulty.HTTPRule{Status: 503})
			return tr
		}
	})
	err := objectstore.PutBytes(ctx, s, "down", []byte("x"), objectstore.CreateOptions{})
	if !errors.Is(err, objectstore.ErrUnavailable) {
		t.Fatalf("put during outage = %v, want ErrUnavailable", err)
	}
	if n := tr.Requests(); n != 10 {
		t.Fatalf("%d attempts, want the default 10", n)
	}
	// Nine retries within seconds: one line (then one each 30 s).
	if n := strings.Count(logBuf.String(), "retrying request S3/PutObject"); n != 1 {
		t.Fatalf("%d lines for 9 retries, want 1:\n%s", n, logBuf.String())
	}
	if _, err := s.Head(ctx, "down"); !errors.Is(err, objectstore.ErrUnavailable) {
		t.Fatalf("head during outage = %v", err)
	}
	tr.SetRules()
	if err := objectstore.PutBytes(ctx, s, "down", []byte("x"), objectstore.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A ranged read whose body keeps being cut gives up with ErrUnavailable
// and io.ErrUnexpectedEOF, never short data.
func TestTruncatedForever(t *testing.T) {
	srv := miniotest.Shared(t)
	ctx := t.Context()
	s, _, tr := openFaulty(t, srv)
	data := objectstoretest.Data(8, 100_000)
	if err := objectstore.PutBytes(ctx, s, "cut", data, objectstore.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r, _, err := s.ReadObject(ctx, "cut")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	tr.SetRules(faulty.HTTPRule{Kinds: []string{faulty.KindGetObject}, TruncateBody: true})
	err = r.ReadAt(ctx, make([]byte, len(data)), 0)
	if !errors.Is(err, objectstore.ErrUnavailable) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("ReadAt = %v", err)
	}
	rc, err := r.ReadRange(ctx, 0, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if !errors.Is(err, io.ErrUnexpectedEOF) || !bytes.Equal(got, data[:len(got)]) {
		t.Fatalf("ReadRange: %d bytes, %v", len(got), err)
	}
}

// The faulty Store wrapper around s3, with WithRetry on top, passes the
// conformance suite.
func TestConformanceFaultyWrapperRetried(t *testing.T) {
	srv := miniotest.Shared(t)
	objectstoretest.Run(t, func(t *testing.T) objectstore.Store {
		s, _ := open(t, srv, nil)
		f := faulty.Wrap(s, 9,
			faulty.Rule{Ops: faulty.OpReadAt | faulty.OpReadRange, Probability: 0.2, Truncate: true},
			faulty.Rule{Ops: faulty.OpRead | faulty.OpHead | faulty.OpList | faulty.OpDelete, Probability: 0.2, Throttle: true},
		)
		return objectstore.WithRetry(f, objectstore.RetryOptions{MaxAttempts: 12, BaseBackoff: time.Microsecond, MaxBackoff: time.Millisecond})
	}, objectstoretest.Options{AllowPrefixConflict: true})
}

// A service that hangs before answering: ResponseTimeout fires on the
// real transport and the retryer tries again. A proxy in front of MinIO
// holds the first requests until the client has given up on them.
func TestResponseTimeoutRetried(t *testing.T) {
	srv := miniotest.Shared(t)
	target, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var hung atomic.Int32
	release := make(chan struct{})
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hung.Add(1) <= 2 {
			select { // hold until the test ends or the client hangs up
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	defer close(release)
	bucket := srv.NewBucket(t)
	s, err := s3.New(t.Context(), s3.Config{
		Bucket: bucket, Endpoint: front.URL, Region: miniotest.Region, PathStyle: true,
		AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey,
		// Long enough that MinIO's own answer (through the proxy, on a
		// loaded machine with the race detector) is never taken for a
		// hang: the count below is exact.
		ResponseTimeout: 2 * time.Second, BaseBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := objectstore.PutBytes(t.Context(), s, "slow", []byte("eventually"), objectstore.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := minioGet(t, srv, bucket, "slow"); string(got) != "eventually" {
		t.Fatalf("got %q", got)
	}
	if n := hung.Load(); n != 3 {
		t.Fatalf("%d requests reached the proxy, want 2 hung and 1 answered", n)
	}
}

// OpenRange reads a range with one GET (no HEAD), returns the object's size
// from the response, refuses ranges past the end and missing objects, and
// resumes a cut transfer from the same version of the object.
func TestOpenRange(t *testing.T) {
	srv := miniotest.Shared(t)
	ctx := t.Context()
	s, bucket, tr := openFaulty(t, srv)
	data := objectstoretest.Data(5, 1<<20+7)
	if _, err := srv.Client.PutObject(ctx, bucket, "ranged", bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	size := int64(len(data))
	for _, c := range [][2]int64{{0, 1}, {size - 1, 1}, {0, size}, {1 << 20, 7}, {12345, 65536}} {
		heads := tr.Requests(faulty.KindHeadObject)
		rc, got, err := s.OpenRange(ctx, "ranged", c[0], c[1])
		if err != nil {
			t.Fatalf("OpenRange(%d, %d): %v", c[0], c[1], err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || got != size || !bytes.Equal(b, data[c[0]:c[0]+c[1]]) {
			t.Fatalf("OpenRange(%d, %d): size %d, %d bytes, %v", c[0], c[1], got, len(b), err)
		}
		if tr.Requests(faulty.KindHeadObject) != heads {
			t.Fatal("OpenRange sent a HEAD")
		}
	}
	for _, c := range [][2]int64{{size, 1}, {size - 1, 2}, {size + 100, 5}, {-1, 5}, {0, 0}} {
		if rc, _, err := s.OpenRange(ctx, "ranged", c[0], c[1]); !errors.Is(err, objectstore.ErrOutOfRange) {
			if rc != nil {
				rc.Close()
			}
			t.Fatalf("OpenRange(%d, %d) past the end = %v", c[0], c[1], err)
		}
	}
	if _, _, err := s.OpenRange(ctx, "missing", 0, 1); !s.IsNotExistError(err) {
		t.Fatalf("OpenRange of a missing object = %v", err)
	}
	// Cut once: resumed, the same bytes.
	tr.SetRules(faulty.HTTPRule{Kinds: []string{faulty.KindGetObject}, TruncateBody: true, Times: 1})
	rc, _, err := s.OpenRange(ctx, "ranged", 100, size-100)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(b, data[100:]) {
		t.Fatalf("resumed read: %d bytes, %v", len(b), err)
	}
	rc.Close()
	if tr.Injected(faulty.KindGetObject) != 1 {
		t.Fatal("the transfer was not cut")
	}
	// Replaced while a cut read resumes: refused, never mixed.
	tr.SetRules(faulty.HTTPRule{Kinds: []string{faulty.KindGetObject}, TruncateBody: true, Times: 1})
	rc, _, err = s.OpenRange(ctx, "ranged", 0, size)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := srv.Client.PutObject(ctx, bucket, "ranged", bytes.NewReader([]byte("new")), 3, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(rc); err == nil || !bytes.Equal(b, data[:len(b)]) {
		t.Fatalf("read across a replacement: %d bytes, %v", len(b), err)
	}
}

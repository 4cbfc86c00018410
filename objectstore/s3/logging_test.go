package s3

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/smithy-go/logging"

	"github.com/sediment-io/sediment/internal/testutil"
)

// The SDK's retry lines: each kind once, then once a sdkLogEvery with the
// count left out; 404s and callers' timeouts are not logged as failures.
func TestSDKLoggerThrottles(t *testing.T) {
	var buf testutil.Buffer
	now := time.Unix(1000, 0)
	l := newSDKLogger(slog.New(slog.NewTextHandler(&buf, nil)), func() time.Time { return now })
	for i := range 50 {
		l.Logf(logging.Debug, "retrying request %s/%s, attempt %d", "S3", "GetObject", i+2)
		l.Logf(logging.Debug, "retrying request %s/%s, attempt %d", "S3", "PutObject", i+2)
		now = now.Add(100 * time.Millisecond)
	}
	if n := strings.Count(buf.String(), "retrying request S3/GetObject"); n != 1 {
		t.Fatalf("%d lines for 50 GetObject retries in 5 s, want 1:\n%s", n, buf.String())
	}
	if n := strings.Count(buf.String(), "retrying request S3/PutObject"); n != 1 {
		t.Fatalf("%d lines for 50 PutObject retries in 5 s, want 1:\n%s", n, buf.String())
	}
	now = now.Add(sdkLogEvery)
	l.Logf(logging.Debug, "retrying request %s/%s, attempt %d", "S3", "GetObject", 3)
	if !strings.Contains(buf.String(), `msg="s3: retrying request S3/GetObject" repeated=49`) {
		t.Fatalf("no line with the count after %v:\n%s", sdkLogEvery, buf.String())
	}
	before := len(buf.String())
	l.Logf(logging.Debug, "request failed with unretryable error %v", "operation error S3: HeadObject, https response error StatusCode: 404, RequestID: x, NotFound")
	if len(buf.String()) != before {
		t.Fatalf("a 404 logged: %s", buf.String()[before:])
	}
	l.Logf(logging.Debug, "request failed with unretryable error %v", "operation error S3: GetObject, canceled, context deadline exceeded")
	if !strings.Contains(buf.String(), "request stopped by its caller (timeout or shutdown)") || strings.Contains(buf.String(), "unretryable") {
		t.Fatalf("a caller's timeout:\n%s", buf.String())
	}
}

package s3

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/aws/smithy-go/logging"
)

// sdkLogEvery is how often one kind of the SDK's retry lines is logged while
// it repeats: a bucket that does not answer made the SDK log each retried
// attempt, about five lines a second for one consumer and one producer
// (182 lines in a 35 s outage).
const sdkLogEvery = 30 * time.Second

// sdkLogger turns the AWS SDK's retry log (aws.LogRetries) into slog lines:
// each kind of line (a retried operation, a request that failed without a
// retry, retries exhausted) once, then at most once a sdkLogEvery with how
// many were left out; a 404 (an object looked for that is not there, as the
// broker's access check at start) is not a failure and is left out.
type sdkLogger struct {
	log *slog.Logger
	now func() time.Time
	mu  struct {
		sync.Mutex
		kinds map[string]*sdkLogKind
	}
}

type sdkLogKind struct {
	logged  time.Time
	skipped int
}

func newSDKLogger(log *slog.Logger, now func() time.Time) *sdkLogger {
	l := &sdkLogger{log: log, now: now}
	l.mu.kinds = map[string]*sdkLogKind{}
	return l
}

// Logf implements logging.Logger.
func (l *sdkLogger) Logf(class logging.Classification, format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	kind := format
	level := slog.LevelInfo
	if class == logging.Warn {
		level = slog.LevelWarn
	}
	switch {
	case strings.HasPrefix(format, "retrying request") && len(v) >= 2:
		kind = fmt.Sprintf("retrying %v/%v", v[0], v[1])
		msg = fmt.Sprintf("retrying request %v/%v", v[0], v[1])
	case strings.HasPrefix(format, "request failed with unretryable error"):
		if strings.Contains(msg, "StatusCode: 404") {
			return
		}
		if strings.Contains(msg, "context canceled") || strings.Contains(msg, "deadline exceeded") {
			// Not the SDK's verdict on the bucket: the caller
			// stopped waiting (its timeout, or a shutdown).
			kind, msg = "gave up", "request stopped by its caller (timeout or shutdown)"
		} else {
			msg = "request failed without a retry: " + fmt.Sprint(v...)
		}
	}
	l.mu.Lock()
	k := l.mu.kinds[kind]
	if k == nil {
		if len(l.mu.kinds) > 100 {
			l.mu.kinds = map[string]*sdkLogKind{}
		}
		k = &sdkLogKind{}
		l.mu.kinds[kind] = k
	}
	now := l.now()
	if !k.logged.IsZero() && now.Sub(k.logged) < sdkLogEvery {
		k.skipped++
		l.mu.Unlock()
		return
	}
	skipped := k.skipped
	k.logged, k.skipped = now, 0
	l.mu.Unlock()
	attrs := []any{}
	if skipped > 0 {
		attrs = append(attrs, "repeated", skipped, "every", sdkLogEvery)
	}
	l.log.Log(context.Background(), level, "s3: "+msg, attrs...)
}

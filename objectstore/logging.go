package objectstore

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"time"
)

// WithLogging returns a Store that logs every call on s (and on its Readers
// and Writers) to logger at debug level, errors at warn level, with the key,
// the range or size, and the duration. Tests use it to see, and assert, the
// order of uploads and deletes.
func WithLogging(s Store, logger *slog.Logger) Store {
	return &loggingStore{s: s, log: logger}
}

type loggingStore struct {
	s   Store
	log *slog.Logger
}

var _ Store = (*loggingStore)(nil)

func (l *loggingStore) done(ctx context.Context, op string, start time.Time, err error, attrs ...any) {
	attrs = append(attrs, slog.Duration("took", time.Since(start)))
	if err != nil {
		l.log.WarnContext(ctx, "objectstore: "+op, append(attrs, slog.Any("err", err))...)
		return
	}
	l.log.DebugContext(ctx, "objectstore: "+op, attrs...)
}

func (l *loggingStore) ReadObject(ctx context.Context, key string) (Reader, int64, error) {
	start := time.Now()
	r, size, err := l.s.ReadObject(ctx, key)
	l.done(ctx, "read-object", start, err, slog.String("key", key), slog.Int64("size", size))
	if err != nil {
		return nil, 0, err
	}
	return &loggingReader{r: r, key: key, l: l}, size, nil
}

func (l *loggingStore) CreateObject(ctx context.Context, key string, opts CreateOptions) (Writer, error) {
	start := time.Now()
	w, err := l.s.CreateObject(ctx, key, opts)
	l.done(ctx, "create-object", start, err, slog.String("key", key), slog.Bool("no-overwrite", opts.NoOverwrite))
	if err != nil {
		return nil, err
	}
	return &loggingWriter{w: w, key: key, l: l, ctx: ctx}, nil
}

func (l *loggingStore) Head(ctx context.Context, key string) (ObjectInfo, error) {
	start := time.Now()
	info, err := l.s.Head(ctx, key)
	l.done(ctx, "head", start, err, slog.String("key", key), slog.Int64("size", info.Size))
	return info, err
}

func (l *loggingStore) List(ctx context.Context, prefix, delimiter string) (Listing, error) {
	start := time.Now()
	res, err := l.s.List(ctx, prefix, delimiter)
	l.done(ctx, "list", start, err, slog.String("prefix", prefix), slog.String("delimiter", delimiter),
		slog.Int("objects", len(res.Objects)), slog.Int("prefixes", len(res.Prefixes)))
	return res, err
}

func (l *loggingStore) Delete(ctx context.Context, keys ...string) error {
	start := time.Now()
	err := l.s.Delete(ctx, keys...)
	l.done(ctx, "delete", start, err, slog.String("keys", strings.Join(keys, ",")))
	return err
}

func (l *loggingStore) IsNotExistError(err error) bool { return l.s.IsNotExistError(err) }

func (l *loggingStore) Close() error {
	start := time.Now()
	err := l.s.Close()
	l.done(context.Background(), "close", start, err)
	return err
}

type loggingReader struct {
	r   Reader
	key string
	l   *loggingStore
}

func (r *loggingReader) ReadAt(ctx context.Context, p []byte, off int64) error {
	start := time.Now()
	err := r.r.ReadAt(ctx, p, off)
	r.l.done(ctx, "read-at", start, err, slog.String("key", r.key), slog.Int64("off", off), slog.Int("len", len(p)))
	return err
}

func (r *loggingReader) ReadRange(ctx context.Context, off, length int64) (io.ReadCloser, error) {
	start := time.Now()
	rc, err := r.r.ReadRange(ctx, off, length)
	r.l.done(ctx, "read-range", start, err, slog.String("key", r.key), slog.Int64("off", off), slog.Int64("len", length))
	return rc, err
}

func (r *loggingReader) Close() error {
	err := r.r.Close()
	r.l.done(context.Background(), "reader-close", time.Now(), err, slog.String("key", r.key))
	return err
}

type loggingWriter struct {
	w       Writer
	key     string
	l       *loggingStore
	ctx     context.Context
	written int64
}

func (w *loggingWriter) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	w.written += int64(n)
	if err != nil {
		w.l.done(w.ctx, "write", time.Now(), err, slog.String("key", w.key))
	}
	return n, err
}

func (w *loggingWriter) Close() error {
	start := time.Now()
	err := w.w.Close()
	w.l.done(w.ctx, "commit", start, err, slog.String("key", w.key), slog.Int64("size", w.written))
	return err
}

func (w *loggingWriter) Abort() error {
	start := time.Now()
	err := w.w.Abort()
	w.l.done(w.ctx, "abort", start, err, slog.String("key", w.key))
	return err
}

package compaction

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/zeebo/xxh3"

	"github.com/sediment-io/sediment/hotlog"
	"github.com/sediment-io/sediment/internal/vfs"
	"github.com/sediment-io/sediment/tiering"
)

// benchKeys is the number of keys of BenchmarkClean: the 1 million
// (10 updates each, about 540 MB of log) by default; SEDIMENT_BENCH_KEYS
// sets another (e.g. 100000 for a quick run).
func benchKeys() int {
	if v, err := strconv.Atoi(os.Getenv("SEDIMENT_BENCH_KEYS")); err == nil && v > 0 {
		return v
	}
	return 1_000_000
}

// benchDeleteDelay is the bench log's file.delete.delay.ms: Kafka's default
// and the broker's, so that the replaced segments' unlinks are left to the
// log's deleter, off the pass, as in a broker.
const benchDeleteDelay = time.Minute

var benchLogConfig = hotlog.Config{SegmentBytes: 16 << 20, Flush: hotlog.FlushOS, FileDeleteDelay: benchDeleteDelay}

// buildBenchLog writes keys*10 records (keys in random order, 100 records a
// batch, 14-byte keys, 32-byte values) to a fresh log on the OS file system,
// sealed. Records are encoded by hand (the same bytes kmsg would write) so
// that 10 M of them take seconds.
func buildBenchLog(b *testing.B, dir string, keys int, tc testCodec) (*hotlog.Log, int64) {
	l, err := hotlog.Open(hotlog.Options{FS: benchFS, Dir: dir, Config: benchLogConfig, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	order := rng.Perm(keys)
	value := make([]byte, 32)
	key := []byte("key-0000000000")
	var raw, batchBuf []byte
	flush := func(n int) {
		batch := kmsg.RecordBatch{PartitionLeaderEpoch: -1, Magic: 2, Attributes: tc.codec, LastOffsetDelta: int32(n - 1),
			ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(n), Records: compressForTest(b, tc, raw)}
		batchBuf = batch.AppendTo(batchBuf[:0])
		binary.BigEndian.PutUint32(batchBuf[8:], uint32(len(batchBuf)-12))
		fixCRC(batchBuf)
		if _, err := l.Append(batchBuf, hotlog.AppendOptions{}); err != nil {
			b.Fatal(err)
		}
		raw = raw[:0]
	}
	n := 0
	for round := range 10 {
		binary.BigEndian.PutUint64(value, uint64(round))
		for _, k := range order {
			for i, v := len(key)-1, k; i >= 4; i-- {
				key[i] = byte('0' + v%10)
				v /= 10
			}
			// length | attributes 0 | timestamp delta 0 | offset delta | key | value | 0 headers
			bodyLen := 1 + 1 + varintLen(int64(n)) + varintLen(int64(len(key))) + len(key) + varintLen(int64(len(value))) + len(value) + 1
			raw = binary.AppendVarint(raw, int64(bodyLen))
			raw = append(raw, 0, 0)
			raw = binary.AppendVarint(raw, int64(n))
			raw = binary.AppendVarint(raw, int64(len(key)))
			raw = append(raw, key...)
			raw = binary.AppendVarint(raw, int64(len(value)))
			raw = append(raw, value...)
			raw = append(raw, 0)
			if n++; n == 100 {
				flush(n)
				n = 0
			}
		}
	}
	if n > 0 {
		flush(n)
	}
	var size int64
	for _, s := range l.Segments() {
		size += s.Size
	}
	// Seal: a roll puts everything into sealed segments.
	big := makeBatch(b, testCodecs[0], time.Now().UnixMilli(), batchOpts{}, kv{[]byte("~seal"), make([]byte, 16<<20-100)})
	sealAt, err := l.Append(big, hotlog.AppendOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := l.Append(makeBatch(b, testCodecs[0], 0, batchOpts{}, kv{[]byte("~tail"), nil}), hotlog.AppendOptions{}); err != nil {
		b.Fatal(err)
	}
	// The cleanable range ends before the seal batch.
	l.SetHighWatermark(sealAt.FirstOffset)
	if err := l.Sync(); err != nil {
		b.Fatal(err)
	}
	return l, size
}

func varintLen(v int64) int {
	var scratch [binary.MaxVarintLen64]byte
	return binary.PutVarint(scratch[:], v)
}

// plainRead reads every sealed segment of l through hotlog's Read into one
// reused buffer: the machine's own limit for a pass over the same bytes.
func plainRead(b *testing.B, l *hotlog.Log) (int64, time.Duration) {
	start := time.Now()
	buf := make([]byte, 1<<20)
	var total int64
	end := l.HighWatermark()
	for off := l.LogStartOffset(); off < end; {
		res, err := l.Read(off, 1<<20, end)
		if err != nil {
			b.Fatal(err)
		}
		if res.Size == 0 {
			res.Release()
			break
		}
		for _, r := range res.Regions {
			if int64(len(buf)) < r.Len {
				buf = make([]byte, r.Len)
			}
			if _, err := r.File.ReadAt(buf[:r.Len], r.Pos); err != nil {
				b.Fatal(err)
			}
			total += r.Len
		}
		off = res.NextOffset
		res.Release()
	}
	return total, time.Since(start)
}

// parseRead reads the same segments and decodes every record once (no
// hashing, no writing): the least work any record-level cleaner does, a
// second yardstick beside the plain read.
func parseRead(b *testing.B, l *hotlog.Log) (int64, time.Duration) {
	c := NewCleaner(CleanerConfig{DedupeBufferBytes: 1024}, nil)
	defer c.Close()
	var st Stats
	c.stats = &st
	start := time.Now()
	records := 0
	err := c.scan(context.Background(), l, l.LogStartOffset(), l.HighWatermark(), func(h *hotlog.BatchHeader, batch []byte) (bool, error) {
		return true, c.records(h, batch, func(r *Record) error {
			records++
			return nil
		})
	})
	if err != nil {
		b.Fatal(err)
	}
	return st.BytesRead, time.Since(start)
}

// BenchmarkClean cleans a log of benchKeys() keys with 10 updates each
// (1 M keys by default, the size), and reports the cleaner's MB/s
// of log cleaned beside a plain read of the same segments in the same run
// (ratio-of-read, goal >= 0.5) and beside a read that decodes every record
// (ratio-of-parse), the map phase's own MB/s, the key map's memory (slots
// and bitmaps, sized for the keys at the 90% load limit), what the pass
// allocated on the Go heap (pass-alloc-MB: the map's bitmaps, buffers; on
// Linux the table of a large map is mapped outside the heap and counted in
// map-MB only), the wall time of the map phase, of the rest, and of the
// fsyncs and unlinks within it, and the log size before and after.
//
// The log has a file.delete.delay.ms of a minute (benchDeleteDelay), as a
// broker's by default: the replaced segments' files are renamed *.deleted in
// the swap and unlinked a minute later by the log's deleter, off the pass, so
// unlink-s within the pass is about 0. deferred-unlink-s is what their
// unlinks cost, timed outside the pass: the log is closed (which leaves
// them) and reopened (which removes them), as a restart within the delay
// would.
func BenchmarkClean(b *testing.B) {
	keys := benchKeys()
	for _, tc := range []testCodec{testCodecs[0], testCodecs[5]} {
		b.Run(tc.name, func(b *testing.B) {
			var cleanTime, mapTime, readTime, parseTime, cleanCPU, readCPU, syncTime, removeTime, deferredTime time.Duration
			var cleaned, read, parsed, after, mapBytes, allocated int64
			var ms0, ms1 runtime.MemStats
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				dir := b.TempDir()
				l, size := buildBenchLog(b, dir, keys, tc)
				cpu0 := cpuTime()
				n, d := plainRead(b, l)
				readCPU += cpuTime() - cpu0
				read += n
				readTime += d
				n, d = parseRead(b, l)
				parsed += n
				parseTime += d
				runtime.GC()
				runtime.ReadMemStats(&ms0)
				sync0, remove0 := benchFS.syncNs.Load(), benchFS.removeNs.Load()
				b.StartTimer()
				start, cpu0 := time.Now(), cpuTime()
				c := NewCleaner(CleanerConfig{DedupeBufferBytes: offsetMapBytes(int64(keys)+1000, int64(keys)*10)}, nil)
				st, err := c.Clean(context.Background(), Target{Log: l, Config: TopicConfig{Policy: Policy{Compact: true}}})
				cleanTime += time.Since(start)
				cleanCPU += cpuTime() - cpu0
				b.StopTimer()
				syncTime += time.Duration(benchFS.syncNs.Load() - sync0)
				removeTime += time.Duration(benchFS.removeNs.Load() - remove0)
				runtime.ReadMemStats(&ms1)
				allocated += int64(ms1.TotalAlloc - ms0.TotalAlloc)
				if err != nil {
					b.Fatal(err)
				}
				if st.MapEnd < int64(keys*10) {
					b.Fatalf("one pass mapped up to %d of %d", st.MapEnd, keys*10)
				}
				mapTime += st.MapDuration
				cleaned += size
				mapBytes = st.MapBytes
				after = 0
				for _, s := range l.Segments() {
					if s.Sealed && s.NextOffset <= l.HighWatermark() {
						after += s.Size
					}
				}
				c.Close()
				l.Close()
				remove0 = benchFS.removeNs.Load()
				l, err = hotlog.Open(hotlog.Options{FS: benchFS, Dir: dir, Config: benchLogConfig, Logger: quiet})
				if err != nil {
					b.Fatal(err)
				}
				deferredTime += time.Duration(benchFS.removeNs.Load() - remove0)
				l.Close()
				os.RemoveAll(dir)
				b.StartTimer()
			}
			cleanMBs := float64(cleaned) / 1e6 / cleanTime.Seconds()
			readMBs := float64(read) / 1e6 / readTime.Seconds()
			b.ReportMetric(cleanMBs, "clean-MB/s")
			b.ReportMetric(readMBs, "read-MB/s")
			b.ReportMetric(cleanMBs/readMBs, "ratio-of-read")
			if cleanCPU > 0 && readCPU > 0 {
				// The same ratio in CPU time (no time lost to other jobs;
				// no wait for the output's fsync either).
				b.ReportMetric(float64(cleaned)/1e6/cleanCPU.Seconds(), "clean-cpu-MB/s")
				b.ReportMetric(float64(read)/1e6/readCPU.Seconds(), "read-cpu-MB/s")
				b.ReportMetric(readCPU.Seconds()/cleanCPU.Seconds()*float64(cleaned)/float64(read), "cpu-ratio-of-read")
			}
			parseMBs := float64(parsed) / 1e6 / parseTime.Seconds()
			b.ReportMetric(parseMBs, "parse-MB/s")
			b.ReportMetric(cleanMBs/parseMBs, "ratio-of-parse")
			b.ReportMetric(float64(cleaned)/1e6/mapTime.Seconds(), "map-phase-MB/s")
			// Where the wall time of a pass goes: the map phase, the rest
			// (rewrite, swap), and within the rest the output's fsyncs and
			// the unlinks of the replaced segments (none: deferred).
			perPass := func(d time.Duration) float64 { return d.Seconds() / float64(b.N) }
			b.ReportMetric(perPass(mapTime), "map-s")
			b.ReportMetric(perPass(cleanTime-mapTime), "rewrite-s")
			b.ReportMetric(perPass(syncTime), "fsync-s")
			b.ReportMetric(perPass(removeTime), "unlink-s")
			b.ReportMetric(perPass(deferredTime), "deferred-unlink-s")
			b.ReportMetric(float64(mapBytes)/1e6, "map-MB")
			b.ReportMetric(float64(allocated)/float64(b.N)/1e6, "pass-alloc-MB")
			b.ReportMetric(float64(cleaned)/float64(b.N)/1e6, "log-MB-before")
			b.ReportMetric(float64(after)/1e6, "log-MB-after")
		})
	}
}

// BenchmarkCleanMap times the map phase alone (buildMap over the whole log of
// BenchmarkClean, a fresh key map each time) on one goroutine and on two
// (mappipe.go), alternately on the same segments in the same run, beside a
// plain read of them: the figures of BenchmarkClean's map-s, without the
// rewrite, and the gain of the second goroutine on this machine as it is
// loaded at the time.
//
// It also takes the serial map phase apart, in CPU time a record, by
// running its first steps alone on the same segments: the read (the plain
// read), the read with each batch's header parsed and CRC checked (scan
// with nothing more), that and the key walk and hashing (scan with
// batchKeys: the pipeline's producer), and the whole serial map phase (the
// puts and the bitmap marks on top). bound-ratio-of-read is what the map
// phase alone would reach against the plain read, both in CPU time, if its
// serial work were split over two cores at no cost: an upper bound of
// ratio-of-read for any split of this work on a 2-core machine (the
// rewrite, the fsync and the swap come on top).
func BenchmarkCleanMap(b *testing.B) {
	keys := benchKeys()
	dir := b.TempDir()
	l, size := buildBenchLog(b, dir, keys, testCodecs[0])
	defer l.Close()
	memory := offsetMapBytes(int64(keys)+1000, int64(keys)*10)
	var wall, cpu [2]time.Duration
	var readTime, readCPU, checkedCPU, keysCPU, keysTime time.Duration
	var read int64
	scanOnly := func(withKeys bool) {
		c := NewCleaner(CleanerConfig{DedupeBufferBytes: 1 << 10}, nil)
		defer c.Close()
		var st Stats
		c.stats = &st
		err := c.scan(context.Background(), l, 0, l.HighWatermark(), func(h *hotlog.BatchHeader, batch []byte) (bool, error) {
			if !withKeys {
				return true, nil
			}
			var err error
			c.keys, err = c.batchKeys(h, batch, c.keys[:0])
			return true, err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cpu0 := cpuTime()
		n, d := plainRead(b, l)
		readCPU += cpuTime() - cpu0
		read += n
		readTime += d
		cpu0 = cpuTime()
		scanOnly(false)
		checkedCPU += cpuTime() - cpu0
		start, cpu0 := time.Now(), cpuTime()
		scanOnly(true)
		keysTime += time.Since(start)
		keysCPU += cpuTime() - cpu0
		for v, pipeline := range []bool{false, true} {
			c := NewCleaner(CleanerConfig{DedupeBufferBytes: memory}, nil)
			c.pipeline = pipeline
			var st Stats
			c.stats = &st
			start, cpu0 := time.Now(), cpuTime()
			end, err := c.buildMap(context.Background(), Target{Log: l}, 0, l.HighWatermark())
			wall[v] += time.Since(start)
			cpu[v] += cpuTime() - cpu0
			c.Close()
			if err != nil || end < int64(keys*10) {
				b.Fatalf("mapped to %d: %v", end, err)
			}
		}
	}
	mbs := func(d time.Duration) float64 { return float64(size) * float64(b.N) / 1e6 / d.Seconds() }
	readMBs := float64(read) / 1e6 / readTime.Seconds()
	b.ReportMetric(readMBs, "read-MB/s")
	b.ReportMetric(mbs(wall[0]), "serial-MB/s")
	b.ReportMetric(mbs(wall[1]), "pipelined-MB/s")
	b.ReportMetric(mbs(cpu[0]), "serial-cpu-MB/s")
	b.ReportMetric(mbs(cpu[1]), "pipelined-cpu-MB/s")
	b.ReportMetric(mbs(wall[1])/readMBs, "pipelined-ratio-of-read")
	b.ReportMetric(mbs(keysTime)/readMBs, "keys-ratio-of-read")
	if readCPU > 0 {
		b.ReportMetric(2*readCPU.Seconds()/cpu[0].Seconds()*float64(size)*float64(b.N)/float64(read), "bound-ratio-of-read")
		perRecord := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) / float64(keys*10) }
		b.ReportMetric(perRecord(readCPU), "read-cpu-ns/rec")
		b.ReportMetric(perRecord(checkedCPU), "checked-cpu-ns/rec")
		b.ReportMetric(perRecord(keysCPU), "keys-cpu-ns/rec")
		b.ReportMetric(perRecord(cpu[0]), "serial-cpu-ns/rec")
	}
}

var benchFS = &timedFS{FS: vfs.Default}

// timedFS is the OS file system with the time spent in Sync (fsync) and
// Remove (unlink) counted, so that BenchmarkClean can show how much of a
// pass they take (they stay in the timed part) and what the deferred unlinks
// cost.
type timedFS struct {
	vfs.FS
	syncNs, removeNs atomic.Int64
}

type timedFile struct {
	vfs.File
	fs *timedFS
}

func (f timedFile) Sync() error {
	start := time.Now()
	err := f.File.Sync()
	f.fs.syncNs.Add(int64(time.Since(start)))
	return err
}

func (t *timedFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return f, err
	}
	return timedFile{f, t}, nil
}

func (t *timedFS) Create(name string) (vfs.File, error) { return t.wrap(t.FS.Create(name)) }
func (t *timedFS) Open(name string) (vfs.File, error)   { return t.wrap(t.FS.Open(name)) }
func (t *timedFS) OpenReadWrite(name string) (vfs.File, error) {
	return t.wrap(t.FS.OpenReadWrite(name))
}
func (t *timedFS) OpenForAppend(name string) (vfs.File, error) {
	return t.wrap(t.FS.OpenForAppend(name))
}
func (t *timedFS) OpenDir(name string) (vfs.File, error) { return t.wrap(t.FS.OpenDir(name)) }

func (t *timedFS) Remove(name string) error {
	start := time.Now()
	err := t.FS.Remove(name)
	t.removeNs.Add(int64(time.Since(start)))
	return err
}

// BenchmarkCleanRemote: tiered compaction of a remote log (an in-memory
// bucket) of benchKeys()/10 keys with 10 updates each (100-record batches,
// 1 MiB segments): MB/s of remote log compacted (download, rewrite, upload,
// swap) beside a plain download of the same segments, and the bucket bytes
// before and after.
func BenchmarkCleanRemote(b *testing.B) {
	keys := benchKeys() / 10
	var cleanTime, readTime time.Duration
	var cleaned, read, before, after int64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		e := newRemoteEnv(b, 1<<20)
		rng := rand.New(rand.NewPCG(1, 1))
		order := rng.Perm(keys)
		var batch []kv
		for round := range 10 {
			for _, k := range order {
				batch = append(batch, kv{[]byte(fmt.Sprintf("key-%010d", k)), []byte(fmt.Sprintf("value-%d-%024d", round, k))})
				if len(batch) == 100 {
					if _, err := e.l.Append(makeBatch(b, testCodecs[0], e.clk.now().UnixMilli(), batchOpts{}, batch...), hotlog.AppendOptions{}); err != nil {
						b.Fatal(err)
					}
					batch = batch[:0]
				}
			}
		}
		seal(b, e.l, e.clk, 1<<20)
		e.upload(b)
		ctx := context.Background()
		m, err := e.tp.Manifest(ctx)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		buf := make([]byte, 1<<20)
		for _, s := range m.Segments {
			r, err := e.tp.OpenSegment(ctx, s)
			if err != nil {
				b.Fatal(err)
			}
			for {
				n, err := r.Read(buf)
				read += int64(n)
				if err != nil {
					break
				}
			}
			r.Close()
		}
		readTime += time.Since(start)
		c := NewCleaner(CleanerConfig{DedupeBufferBytes: offsetMapBytes(int64(keys)+1000, int64(keys)*10)}, e.clk.now)
		b.StartTimer()
		start = time.Now()
		pl, err := c.CleanRemote(ctx, RemoteTarget{Remote: e.tp, Config: TopicConfig{Policy: Policy{Compact: true}}}, tiering.Fence{Token: 1})
		cleanTime += time.Since(start)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		m2, err := e.tp.Manifest(ctx)
		if err != nil || m2.CleanedUpTo != m2.EndOffset {
			b.Fatalf("one pass: %v, checkpoint %d of %d (%+v)", err, m2.CleanedUpTo, m2.EndOffset, pl.Stats)
		}
		cleaned += m.Size()
		before, after = m.Size(), m2.Size()
		c.Close()
		b.StartTimer()
	}
	cleanMBs := float64(cleaned) / 1e6 / cleanTime.Seconds()
	readMBs := float64(read) / 1e6 / readTime.Seconds()
	b.ReportMetric(cleanMBs, "clean-MB/s")
	b.ReportMetric(readMBs, "download-MB/s")
	b.ReportMetric(cleanMBs/readMBs, "ratio-of-download")
	b.ReportMetric(float64(before)/1e6, "bucket-MB-before")
	b.ReportMetric(float64(after)/1e6, "bucket-MB-after")
}

// BenchmarkOffsetMapPut times the key map's puts alone, as the map phase's
// consumer makes them (home buckets computed for a chunk of 2048 keys, the
// buckets prefetched prefetchAhead keys ahead), updating keys already in a
// table sized for n keys (offsetMapBytes, 10 offsets a key): from a table
// that fits the L1 cache (200 keys) to the benchmark's 1 M keys and twice
// that, what a put costs on this machine with its bucket in each level of
// the memory hierarchy (put-ns-<n>, 2^21 puts a table an iteration), and
// l1-ratio = the L1 put's cost / the 1 M-key put's: the put against its
// own limit on this machine. The chunk's keys are made in place (a digest
// mixed from a key number, a few ns a key, in every figure: the L1 one
// shows them), so that they come from the cache as in the map phase, not
// from a stream of stored keys larger than the cache.
func BenchmarkOffsetMapPut(b *testing.B) {
	digest := func(k uint64) xxh3.Uint128 {
		return xxh3.Uint128{Hi: splitmix64(k), Lo: splitmix64(k ^ 0x9e3779b97f4a7c15)}
	}
	sizes := []int{200, 20_000, 1_000_000, 2_000_000}
	maps := make([]*offsetMap, len(sizes))
	for i, keys := range sizes {
		maps[i] = newOffsetMap(offsetMapBytes(int64(keys)+1000, 10*int64(keys)))
		defer maps[i].release()
		for k := range keys {
			maps[i].putHash(digest(uint64(k)), int64(k))
		}
	}
	const chunk, puts = 2048, 1 << 21
	ch := make([]keyOffset, chunk)
	homes := make([]uint32, 0, chunk)
	spent := make([]time.Duration, len(sizes))
	var sink uint32
	b.ResetTimer()
	for range b.N {
		for i, m := range maps {
			keys := sizes[i]
			off := int64(keys)
			// Key numbers in a scattered order over all keys (7919 is a
			// prime that divides none of the counts).
			k, step := uint64(0), uint64(7919%keys)
			start := time.Now()
			for n := 0; n < puts; n += chunk {
				for j := range ch {
					if k += step; k >= uint64(keys) {
						k -= uint64(keys)
					}
					ch[j] = keyOffset{digest: digest(k), offset: off}
					off++
				}
				homes = m.homes(homes[:0], ch)
				sink += m.prefetch(homes[:prefetchAhead])
				for j := range ch {
					if j%16 == 0 && j+prefetchAhead < len(homes) {
						sink += m.prefetch(homes[j+prefetchAhead : min(j+prefetchAhead+16, len(homes))])
					}
					m.putHome(ch[j].digest, int(homes[j]), ch[j].offset)
				}
			}
			spent[i] += time.Since(start)
			if m.entries != keys {
				b.Fatalf("%d entries for %d keys (sink %d)", m.entries, keys, sink)
			}
		}
	}
	ns := func(i int) float64 { return float64(spent[i].Nanoseconds()) / float64(b.N) / puts }
	for i, keys := range sizes {
		b.ReportMetric(ns(i), fmt.Sprintf("put-ns-%d", keys))
	}
	b.ReportMetric(ns(0)/ns(2), "l1-ratio")
}

// splitmix64 mixes x (SplitMix64's finalizer).
func splitmix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

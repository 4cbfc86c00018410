package broker

import (
	"slices"
	"strconv"
	"strings"
)

// The stored state of a share-partition: one value per partition in the
// metadata log (metadata.ResourceShareState, key "<topic id hex>:<partition>"),
//
//	<start>[;<end>[;<first>-<last>@<deliveries>,…]]
//
// start is the SPSO, end the first offset never delivered, and the runs
// the records in flight between them with their delivery counts (a record
// held by a member is stored as in flight: a new leader makes it available
// again); every other offset in [start, end) is done (accepted, rejected,
// archived, a gap or an aborted transaction's). So a new leader delivers
// again only what was in flight, and counts on from the stored deliveries
// (Kafka's share coordinator keeps the same: its state batches). A value of
// only <start> (an admin's AlterShareGroupOffsets, or state too fragmented
// to store) means nothing after it is done.

// shareStateMaxBytes bounds one partition's value: past it only the start
// is stored (more is delivered again after a failover, never less).
const shareStateMaxBytes = 16 << 10

// shareStateMaxWindow bounds end - start in a stored value read back.
const shareStateMaxWindow = 1 << 22

type shareStateRun struct {
	first, last int64
	deliveries  int16
}

type shareStored struct {
	start, end int64
	runs       []shareStateRun
}

// encodeState renders sp's state.
func (sp *sharePartition) encodeState() string {
	start := strconv.FormatInt(sp.start, 10)
	if sp.end <= sp.start {
		return start
	}
	offs := make([]int64, 0, len(sp.recs))
	for off := range sp.recs {
		offs = append(offs, off)
	}
	slices.Sort(offs)
	var b strings.Builder
	b.WriteString(start)
	b.WriteByte(';')
	b.WriteString(strconv.FormatInt(sp.end, 10))
	for i := 0; i < len(offs); {
		j, d := i, sp.recs[offs[i]].deliveries
		for j+1 < len(offs) && offs[j+1] == offs[j]+1 && sp.recs[offs[j+1]].deliveries == d {
			j++
		}
		if i == 0 {
			b.WriteByte(';')
		} else {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(offs[i], 10))
		b.WriteByte('-')
		b.WriteString(strconv.FormatInt(offs[j], 10))
		b.WriteByte('@')
		b.WriteString(strconv.Itoa(int(d)))
		if b.Len() > shareStateMaxBytes {
			return start
		}
		i = j + 1
	}
	return b.String()
}

// parseShareState reads a stored value; ok is false when not even the
// start can be read. A malformed rest is ignored (start only).
func parseShareState(v string) (st shareStored, ok bool) {
	fields := strings.SplitN(v, ";", 3)
	start, err := strconv.ParseInt(fields[0], 10, 64)
	if err != nil || start < 0 {
		return shareStored{}, false
	}
	only := shareStored{start: start, end: start}
	if len(fields) == 1 {
		return only, true
	}
	end, err := strconv.ParseInt(fields[1], 10, 64)
	if err != nil || end < start || end-start > shareStateMaxWindow {
		return only, true
	}
	st = shareStored{start: start, end: end}
	if len(fields) == 2 || fields[2] == "" {
		return st, true
	}
	next := start
	for _, r := range strings.Split(fields[2], ",") {
		span, d, ok1 := strings.Cut(r, "@")
		a, z, ok2 := strings.Cut(span, "-")
		first, err1 := strconv.ParseInt(a, 10, 64)
		last, err2 := strconv.ParseInt(z, 10, 64)
		n, err3 := strconv.ParseInt(d, 10, 16)
		if !ok1 || !ok2 || err1 != nil || err2 != nil || err3 != nil || first < next || last < first || last >= end || n < 1 {
			return only, true
		}
		st.runs = append(st.runs, shareStateRun{first, last, int16(n)})
		next = last + 1
	}
	return st, true
}

// inFlight is the number of records in the stored runs.
func (st shareStored) inFlight() int64 {
	var n int64
	for _, r := range st.runs {
		n += r.last - r.first + 1
	}
	return n
}

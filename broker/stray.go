package broker

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sediment-io/sediment/metadata"
)

// Stray partition directories (Kafka's "stray" logs, KAFKA-14616).
//
// A running broker renames a partition's directory for deletion when it
// applies the metadata change that takes its replica away (reconcile: a
// reassignment's end, a deleted topic; dir_delete.go). A broker that was
// down meanwhile finds at start
// directories under logs/ that the metadata no longer places here:
//
//   - its replica was moved away by a reassignment (AlterPartitionReassignments)
//     that completed while it was down;
//   - the topic was deleted, or deleted and re-created under the same name
//     (the directory's topic_id is not the topic's id any more);
//   - a directory with no readable topic_id (a crash while the partition was
//     first opened, before any record was written) of a partition this broker
//     does not replicate.
//
// When. Only after the broker has caught up with the metadata log: openStore
// registers (a command committed after every change made while the broker
// was down), waits until its own state has applied that registration, and
// only then decides. Deciding on an older state (a voter still replaying its
// log) could take a replica this broker still holds for a stray one. A
// replica of an in-flight reassignment, being added or being removed, is in
// the partition's Replicas and is kept until the reassignment completes.
//
// Why deleting is safe, tiered data included. A reassignment completes only
// once every target replica is in the ISR; a broker that was down was fenced,
// so out of every ISR, and leads nothing. Every committed record of the
// partition is therefore on each of its current replicas, or in the bucket
// below the committed remote end (a leader or follower deletes local
// segments only below it, and only the leader uploads: a stray directory's
// broker never uploaded anything of it after it went down, and uploads before
// that are in the manifest the current leader continues). What only the stray
// directory holds is above the high watermark it last knew: records never
// acknowledged to acks=all, which a returning follower truncates anyway. The
// exception is a partition that elected an out-of-sync leader
// (unclean.leader.election.enable): records only this broker had are already
// gone from the partition's log, and the stray copy is where an operator can
// still read them.
//
// How. As Kafka does, a stray directory is first renamed, never deleted at
// once: <topic>-<n> becomes <topic>-<n>.<unix ms>-stray (fsync of logs/), no
// log is opened on it, and it is deleted StrayLogDeleteDelay after that time
// (Config; 1h by default, negative: never, the operator removes it), by
// the loop that also removes -delete directories (dir_delete.go). Until
// then an operator can copy it away (the segments are Kafka's record batch
// format, docs/hotlog.md). A partition that this broker becomes a replica of again starts from an empty
// directory and fetches from the leader, as any new replica.

// straySuffix ends the name of a renamed stray directory. The name cannot be
// a partition directory's: "stray" is not a partition number.
const straySuffix = "-stray"

// parsePartitionDir splits a partition directory name, <topic>-<n>.
func parsePartitionDir(name string) (topic string, idx int32, ok bool) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.ParseInt(name[i+1:], 10, 32)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != name[i+1:] {
		return "", 0, false
	}
	return name[:i], int32(n), true
}

// strayReason says why the partition directory name, whose topic_id file
// holds id (hasID false: missing or unreadable), is not this broker's (me)
// under st; "" means it is and stays. name must parse (parsePartitionDir).
func strayReason(st *metadata.State, me int32, name string, id metadata.UUID, hasID bool) string {
	topic, idx, ok := parsePartitionDir(name)
	if !ok {
		return ""
	}
	var t *metadata.Topic
	if hasID {
		t, ok = st.TopicByID(id)
		if !ok {
			if _, exists := st.Topic(topic); exists {
				return "topic re-created with another id"
			}
			return "topic deleted"
		}
		if t.Name != topic {
			return fmt.Sprintf("topic id belongs to topic %q", t.Name)
		}
	} else {
		// No id: the partition was being opened for the first time
		// (openLocked writes topic_id before the log). Keep it if it is
		// ours: opening it rewrites the id.
		if t, ok = st.Topic(topic); !ok {
			return "no topic id, and no such topic"
		}
	}
	if idx >= int32(len(t.Partitions)) {
		return "no such partition"
	}
	p := t.Partitions[idx]
	// During a reassignment Replicas holds the target (with the replicas
	// being added) and the replicas being removed: all are kept.
	if slices.Contains(p.Replicas, me) || slices.Contains(p.Adding, me) {
		return ""
	}
	if !hasID {
		return "no topic id, and not a replica"
	}
	return fmt.Sprintf("not a replica (replicas %v)", p.Replicas)
}

// strayDir is a partition directory found stray at start.
type strayDir struct {
	Name   string
	Reason string
}

// findStrayDirs lists the partition directories under logsDir that are not
// this broker's (me) under st. Entries that are not partition directories
// (renamed stray ones, anything else an operator put there) are left alone.
func findStrayDirs(logsDir string, st *metadata.State, me int32) ([]strayDir, error) {
	ents, err := os.ReadDir(logsDir)
	if err != nil {
		return nil, err
	}
	var out []strayDir
	for _, e := range ents {
		if !e.IsDir() || strings.HasSuffix(e.Name(), straySuffix) {
			continue
		}
		if _, _, ok := parsePartitionDir(e.Name()); !ok {
			continue
		}
		id, hasID := readTopicID(filepath.Join(logsDir, e.Name(), "topic_id"))
		if reason := strayReason(st, me, e.Name(), id, hasID); reason != "" {
			out = append(out, strayDir{Name: e.Name(), Reason: reason})
		}
	}
	return out, nil
}

// readTopicID reads a partition directory's topic_id file (a text UUID and
// a newline); false if it is missing, too long or not a UUID.
func readTopicID(name string) (metadata.UUID, bool) {
	f, err := os.Open(name)
	if err != nil {
		return metadata.UUID{}, false
	}
	defer f.Close()
	var buf [64]byte // 36 characters and a newline
	n, err := io.ReadFull(f, buf[:])
	if err != io.ErrUnexpectedEOF && err != io.EOF {
		return metadata.UUID{}, false // a read error, or longer than any id
	}
	return parseUUID(strings.TrimSpace(string(buf[:n])))
}

// strayDirName is the name a stray directory is renamed to at now.
func strayDirName(name string, now time.Time) string {
	return fmt.Sprintf("%s.%d%s", name, now.UnixMilli(), straySuffix)
}

// parseStrayDirName returns when a renamed stray directory was renamed.
func parseStrayDirName(name string) (time.Time, bool) {
	return parseRenamedDir(name, straySuffix)
}

// parseRenamedDir parses <topic>-<n>.<unix ms><suffix>, the name of a
// partition directory renamed as stray or for deletion, and returns the
// time in it.
func parseRenamedDir(name, suffix string) (time.Time, bool) {
	rest, ok := strings.CutSuffix(name, suffix)
	if !ok {
		return time.Time{}, false
	}
	i := strings.LastIndexByte(rest, '.')
	if i < 0 {
		return time.Time{}, false
	}
	if _, _, ok := parsePartitionDir(rest[:i]); !ok {
		return time.Time{}, false
	}
	ms, err := strconv.ParseInt(rest[i+1:], 10, 64)
	if err != nil || ms < 0 || strconv.FormatInt(ms, 10) != rest[i+1:] {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// renameStrayDirs renames every stray partition directory (see the top of
// this file). st must include the broker's registration: the caller has
// waited for it. It runs in openStore before any partition opens.
func (s *store) renameStrayDirs(st *metadata.State) {
	strays, err := findStrayDirs(s.logsDir, st, s.b.cfg.NodeID)
	if err != nil {
		s.b.log.Warn("listing partition directories", "dir", s.logsDir, "err", err)
		return
	}
	now := time.Now()
	renamed := 0
	for _, d := range strays {
		to := strayDirName(d.Name, now)
		if err := os.Rename(filepath.Join(s.logsDir, d.Name), filepath.Join(s.logsDir, to)); err != nil {
			s.b.log.Warn("renaming stray partition directory", "dir", d.Name, "err", err)
			continue
		}
		renamed++
		when := "never (stray-log-delete-delay is negative)"
		if s.b.cfg.StrayLogDeleteDelay >= 0 {
			when = now.Add(s.b.cfg.StrayLogDeleteDelay).UTC().Format(time.RFC3339)
		}
		s.b.log.Warn("stray partition directory renamed: this broker no longer holds the partition",
			"dir", d.Name, "reason", d.Reason, "renamed_to", to, "deleted_at", when, "metadata_version", st.Version)
	}
	if renamed > 0 {
		if err := syncDir(s.logsDir); err != nil {
			s.b.log.Warn("syncing the logs directory", "dir", s.logsDir, "err", err)
		}
	}
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

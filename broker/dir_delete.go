package broker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// Removing a partition's directory (Kafka's "-delete" logs).
//
// A running broker that applies a metadata change taking a partition away
// from it (its topic deleted; a reassignment that moved its replica
// elsewhere) closes the partition's log and renames its directory
//
//	<topic>-<n>  →  <topic>-<n>.<unix ms>-delete
//
// then fsyncs logs/. A background loop (dirDeleteLoop) removes the renamed
// directory DeletedLogDeleteDelay after the rename (deleted-log-delete-delay,
// 1m: Kafka's file.delete.delay.ms; negative: at once). The rename frees the
// live name at once, so a topic re-created under the same name opens a
// fresh, empty <topic>-<n> while the old data waits; the delay is an
// operator's window to copy the old segments away. A partition directory
// that was not open when its topic was deleted and that a re-created topic
// of the same name finds (openLocked) goes the same way.
//
// Names. A live partition directory ends in -<digits> (parsePartitionDir)
// and a stray one in -stray, so a -delete name is neither. Two renames of the
// same partition in one millisecond take the next free millisecond.
//
// Leftovers. A -delete directory is garbage by definition: the metadata no
// longer placed its partition here when it was renamed. The ones this
// process renamed are remembered (store.deleting) with the time they are
// due; any other (a broker stopped or crashed before removing it) is removed
// as soon as the loop first runs, at start, whatever the time in its name.
//
// The same loop removes stray directories (stray.go) once
// StrayLogDeleteDelay has passed since the time in their names.

// deleteSuffix ends the name of a directory renamed for deletion.
const deleteSuffix = "-delete"

// deleteDirName is the name a partition directory is renamed to for
// deletion at ms (unix milliseconds).
func deleteDirName(name string, ms int64) string {
	return fmt.Sprintf("%s.%d%s", name, ms, deleteSuffix)
}

// parseDeleteDirName returns when a directory renamed for deletion was
// renamed.
func parseDeleteDirName(name string) (time.Time, bool) {
	return parseRenamedDir(name, deleteSuffix)
}

// renameForDelete renames the partition directory dir (under logsDir, its
// log closed) for deletion and schedules its removal; reason is why it goes
// (logged); now is the time of the rename. A missing directory is not an
// error: there is nothing to keep.
func (s *store) renameForDelete(dir, reason string, now time.Time) error {
	delay := max(s.b.cfg.DeletedLogDeleteDelay, 0)
	name := filepath.Base(dir)
	s.deleting.Lock()
	to := ""
	for ms := now.UnixMilli(); ; ms++ {
		to = deleteDirName(name, ms)
		if _, err := os.Lstat(filepath.Join(s.logsDir, to)); err != nil {
			break // free (or unreadable: the rename says why)
		}
	}
	if err := os.Rename(dir, filepath.Join(s.logsDir, to)); err != nil {
		s.deleting.Unlock()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	due := now.Add(delay)
	if s.deleting.due == nil {
		s.deleting.due = make(map[string]time.Time)
	}
	s.deleting.due[to] = due
	s.deleting.Unlock()
	if err := syncDir(s.logsDir); err != nil {
		s.b.log.Warn("syncing the logs directory", "dir", s.logsDir, "err", err)
	}
	s.b.log.Info("partition directory renamed for deletion", "dir", name, "reason", reason,
		"renamed_to", to, "deleted_at", due.UTC().Format(time.RFC3339Nano))
	select {
	case s.deleteKick <- struct{}{}:
	default:
	}
	return nil
}

// deleteDueDirs removes the directories pending deletion that are due at
// now: -delete ones this process renamed once their delay has passed, any
// other -delete one at once (a leftover), stray ones StrayLogDeleteDelay
// after the time in their names (never if it is negative). It returns when
// the next one is due (pending false: none left).
func (s *store) deleteDueDirs(now time.Time) (next time.Time, pending bool) {
	type candidate struct {
		name, kind string
		due        time.Time
	}
	var work []candidate
	strayDelay := s.b.cfg.StrayLogDeleteDelay
	s.deleting.Lock()
	ents, err := os.ReadDir(s.logsDir)
	if err != nil {
		s.deleting.Unlock()
		s.b.log.Warn("listing partition directories", "dir", s.logsDir, "err", err)
		return now.Add(time.Minute), true
	}
	listed := make(map[string]bool)
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if at, ok := parseStrayDirName(e.Name()); ok {
			if strayDelay >= 0 {
				work = append(work, candidate{e.Name(), "stray", at.Add(strayDelay)})
			}
			continue
		}
		if _, ok := parseDeleteDirName(e.Name()); ok {
			listed[e.Name()] = true
			due, ours := s.deleting.due[e.Name()]
			if !ours {
				due = now // left by an earlier run: garbage
			}
			work = append(work, candidate{e.Name(), "delete", due})
		}
	}
	// Renames happen under the lock held across the listing: a name not
	// listed is gone (removed by an operator).
	for name := range s.deleting.due {
		if !listed[name] {
			delete(s.deleting.due, name)
		}
	}
	s.deleting.Unlock()

	later := func(at time.Time) {
		if !pending || at.Before(next) {
			next, pending = at, true
		}
	}
	for _, c := range work {
		if now.Before(c.due) {
			later(c.due)
			continue
		}
		path := filepath.Join(s.logsDir, c.name)
		_, size := dirUsage(path)
		if err := os.RemoveAll(path); err != nil {
			s.b.log.Warn("deleting partition directory", "dir", c.name, "kind", c.kind, "err", err)
			later(now.Add(time.Minute))
			continue
		}
		if c.kind == "delete" {
			s.deleting.Lock()
			delete(s.deleting.due, c.name)
			s.deleting.Unlock()
		}
		s.b.log.Info("partition directory deleted", "dir", c.name, "kind", c.kind, "bytes", size)
	}
	return next, pending
}

// dirDeleteLoop removes directories pending deletion as they fall due, and
// wakes when one is renamed for deletion. It runs for the broker's life.
func (s *store) dirDeleteLoop(ctx context.Context) {
	for {
		next, pending := s.deleteDueDirs(time.Now())
		var timer *time.Timer
		var due <-chan time.Time
		if pending {
			timer = time.NewTimer(time.Until(next))
			due = timer.C
		}
		select {
		case <-ctx.Done():
		case <-due:
		case <-s.deleteKick:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// dirUsage counts the files under dir and their bytes (apparent sizes).
// Errors (a file removed meanwhile) are skipped: it is a gauge.
func dirUsage(dir string) (files int, bytes int64) {
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			files++
			bytes += info.Size()
		}
		return nil
	})
	return files, bytes
}

package metadata

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// Change is one committed command as seen by Watch. Command is nil when State
// replaces everything the watcher knew: after a snapshot restore, or when the
// watcher fell too far behind to be sent each change.
type Change struct {
	Version uint64
	Command Command
	State   *State // the state right after the change
}

// applyResponse is what the FSM returns to raft for each command.
type applyResponse struct {
	result Result
	err    error
}

// fsm is the raft.FSM: a thin wrapper that decodes each entry, applies it to
// a private copy of the current State and publishes the copy. It never reads a
// clock or a random source. An entry it cannot decode stops it: from then on
// it applies nothing, refuses snapshots (so the log is kept), and reports the
// error through Err.
type fsm struct {
	logger *slog.Logger
	state  atomic.Pointer[State]
	// publish is called from raft's FSM goroutine after each batch (and after
	// a restore, with restored set).
	publish func(changes []Change, restored *State)
	// observe, when set, is called from raft's FSM goroutine with each
	// batch's changes before its state becomes current (and with restored
	// before a restored state does): the node's sessionClock.
	observe func(changes []Change, restored bool)

	// refuse, when set, makes the entries it returns an error for
	// undecodable (Node.RefuseEntriesForTest).
	refuse atomic.Pointer[func(Command) error]

	mu struct {
		sync.Mutex
		stopped error
	}
}

var _ raft.BatchingFSM = (*fsm)(nil)

func newFSM(logger *slog.Logger, publish func([]Change, *State)) *fsm {
	f := &fsm{logger: logger, publish: publish}
	f.state.Store(newState())
	return f
}

func (f *fsm) current() *State { return f.state.Load() }

func (f *fsm) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.stopped
}

func (f *fsm) Apply(l *raft.Log) any {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

func (f *fsm) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	st := f.current()
	var changes []Change
	stopped := f.err()
	for i, l := range logs {
		if stopped != nil {
			out[i] = applyResponse{err: stopped}
			continue
		}
		if l.Type != raft.LogCommand {
			st = st.clone()
			st.Version = l.Index
			continue
		}
		cmd, err := DecodeCommand(l.Data)
		if r := f.refuse.Load(); r != nil && err == nil {
			err = (*r)(cmd)
		}
		var ignored errIgnored
		switch {
		case errors.As(err, &ignored):
			f.logger.Warn("metadata: skipping unknown ignorable command", "index", l.Index, "err", err)
			st = st.clone()
			st.Version = l.Index
			out[i] = applyResponse{err: err}
			continue
		case err != nil:
			stopped = fmt.Errorf("%w at index %d: %w", ErrFSMStopped, l.Index, err)
			f.logger.Error("metadata: state machine stopped; upgrade this node", "index", l.Index, "err", err)
			f.mu.Lock()
			f.mu.stopped = stopped
			f.mu.Unlock()
			out[i] = applyResponse{err: stopped}
			continue
		}
		next := st.clone()
		next.Version = l.Index
		res, err := cmd.apply(next, l.Index)
		res.Version = l.Index
		if err != nil {
			next = st.clone()
			next.Version = l.Index
		} else {
			changes = append(changes, Change{Version: l.Index, Command: cmd, State: next})
		}
		st = next
		out[i] = applyResponse{result: res, err: err}
	}
	advanced := st != f.current()
	if f.observe != nil && len(changes) > 0 {
		f.observe(changes, false)
	}
	f.state.Store(st)
	// Publish whenever the version moved, even with no change to stream
	// (only rejected commands or configuration entries): WaitForVersion,
	// and so Sync, waits for the version of whatever entry the leader
	// applied last, which is often a rejected command.
	if f.publish != nil && (len(changes) > 0 || advanced) {
		f.publish(changes, nil)
	}
	return out
}

func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	if err := f.err(); err != nil {
		return nil, err
	}
	return &fsmSnapshot{st: f.current()}, nil
}

func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	st, err := ReadSnapshot(rc)
	if err != nil {
		return err
	}
	if f.observe != nil {
		f.observe(nil, true)
	}
	f.state.Store(st)
	if f.publish != nil {
		f.publish(nil, st)
	}
	return nil
}

type fsmSnapshot struct{ st *State }

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(EncodeSnapshot(s.st)); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}

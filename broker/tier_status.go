package broker

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"
)

// TierPartitionStatus is one partition's two tiers as this broker sees them:
// the JSON rows of GET /v1/tier/status on the admin port and of `sediment
// tier status`. Offsets are Kafka offsets (ends exclusive); the remote ones
// are -1 while the bucket holds nothing of the partition.
type TierPartitionStatus struct {
	Topic               string `json:"topic"`
	TopicID             string `json:"topic_id"`
	Partition           int32  `json:"partition"`
	Leader              bool   `json:"leader"` // this broker leads it (only the leader uploads)
	LeaderEpoch         int32  `json:"leader_epoch"`
	RemoteStorageEnable bool   `json:"remote_storage_enable"`

	LocalStartOffset int64 `json:"local_start_offset"`
	LocalEndOffset   int64 `json:"local_end_offset"`
	HighWatermark    int64 `json:"high_watermark"`
	LocalBytes       int64 `json:"local_bytes"`
	LocalSegments    int64 `json:"local_segments"`

	RemoteStartOffset int64  `json:"remote_start_offset"`
	RemoteEndOffset   int64  `json:"remote_end_offset"`
	RemoteBytes       int64  `json:"remote_bytes"`
	RemoteSegments    int64  `json:"remote_segments"`
	ManifestVersion   int64  `json:"manifest_version"`
	ManifestKey       string `json:"manifest_key,omitempty"`

	UploadLagBytes   int64  `json:"upload_lag_bytes"`
	UploadLagOffsets int64  `json:"upload_lag_offsets"`
	LastError        string `json:"last_error,omitempty"`
}

// TierStatus is the answer of GET /v1/tier/status.
type TierStatus struct {
	NodeID     int32                 `json:"node_id"`
	Tiering    bool                  `json:"tiering"` // tiered storage is enabled on this broker
	Partitions []TierPartitionStatus `json:"partitions"`
}

// TierStatus reports every partition this broker holds (of topic, or of
// all topics if topic is empty), with the remote pointer re-read from the
// metadata log (and the manifest if it moved), sorted by topic and
// partition.
func (b *Broker) TierStatus(ctx context.Context, topic string) TierStatus {
	out := TierStatus{NodeID: b.cfg.NodeID, Partitions: []TierPartitionStatus{}}
	g := b.tier()
	if g == nil {
		return out
	}
	out.Tiering = true
	for _, tp := range g.m.Partitions() {
		name := tp.TopicPartition()
		if topic != "" && name.Topic != topic {
			continue
		}
		st, err := tp.LiveStatus(ctx)
		epoch, leader := g.LeaderEpoch(name)
		row := TierPartitionStatus{Topic: name.Topic, TopicID: name.TopicIDString(), Partition: name.Partition,
			Leader: leader, LeaderEpoch: epoch, RemoteStorageEnable: st.RemoteStorageEnable,
			LocalStartOffset: st.LocalStartOffset, LocalEndOffset: st.LocalEndOffset, HighWatermark: st.HighWatermark,
			LocalBytes: st.LocalBytes, LocalSegments: st.LocalSegments,
			RemoteStartOffset: st.RemoteStartOffset, RemoteEndOffset: st.RemoteEndOffset, RemoteBytes: st.RemoteBytes,
			RemoteSegments: st.RemoteSegments, ManifestVersion: st.ManifestVersion, ManifestKey: st.ManifestKey,
			UploadLagBytes: st.UploadLagBytes, UploadLagOffsets: st.UploadLagOffsets, LastError: st.LastError}
		if err != nil && row.LastError == "" {
			row.LastError = err.Error()
		}
		out.Partitions = append(out.Partitions, row)
	}
	slices.SortFunc(out.Partitions, func(a, b TierPartitionStatus) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition) - int(b.Partition)
	})
	return out
}

// TierStatusHandler serves GET /v1/tier/status[?topic=NAME] on the admin
// port: TierStatus as JSON.
func (b *Broker) TierStatusHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !readOnly(w, r) {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		st := b.TierStatus(ctx, r.URL.Query().Get("topic"))
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(st)
	})
}

// readOnly answers 405 to anything but GET and HEAD (the admin endpoints
// only report); it reports whether the request may go on.
func readOnly(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	return false
}

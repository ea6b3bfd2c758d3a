package connect

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Offset is one source partition's committed offset, as Kafka Connect's
// offsets API lists it: both maps are the connector's own (Debezium's
// MySQL and MariaDB connectors: partition {"server": prefix}, offset
// {"file", "pos", "ts_sec", "gtids", ...}).
type Offset struct {
	Partition map[string]any `json:"partition"`
	Offset    map[string]any `json:"offset"`
}

// QueryOffsets asks for a source connector's committed offsets
// (GET /connectors/{name}/offsets, Kafka Connect 3.5+): what it will
// resume from, flushed every offset.flush.interval.ms.
func QueryOffsets(ctx context.Context, client *http.Client, baseURL, connector string) ([]Offset, error) {
	body, err := get(ctx, client, strings.TrimRight(baseURL, "/")+"/connectors/"+url.PathEscape(connector)+"/offsets")
	if err != nil {
		return nil, fmt.Errorf("offsets of connector %s: %w", connector, err)
	}
	var res struct {
		Offsets []Offset `json:"offsets"`
	}
	if err := json.Unmarshal(body, &res); err != nil {
		return nil, fmt.Errorf("offsets of connector %s: %w", connector, err)
	}
	return res.Offsets, nil
}

// BinlogPosition is where a MySQL or MariaDB connector resumes reading
// the binlog: a file, a byte offset in it, and the server time of the
// last event it read there (zero when the offset has none).
type BinlogPosition struct {
	File     string
	Pos      int64
	EventsAt time.Time
}

// BinlogOffset finds the binlog position among a connector's offsets;
// false when none holds one (not a MySQL-family connector, or one that
// has committed nothing yet).
func BinlogOffset(offsets []Offset) (BinlogPosition, bool) {
	for _, o := range offsets {
		file, _ := o.Offset["file"].(string)
		pos, ok := o.Offset["pos"].(float64)
		if file == "" || !ok {
			continue
		}
		b := BinlogPosition{File: file, Pos: int64(pos)}
		if ts, ok := o.Offset["ts_sec"].(float64); ok && ts > 0 {
			b.EventsAt = time.Unix(int64(ts), 0)
		}
		return b, true
	}
	return BinlogPosition{}, false
}

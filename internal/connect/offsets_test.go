package connect

import (
	"encoding/json"
	"testing"
	"time"
)

func TestBinlogOffsetReadsTheMariaDBConnectorsFilePositionAndEventTime(t *testing.T) {
	// As the stack's worker answered for the demo's MariaDB connector, and
	// for its PostgreSQL one (no binlog position).
	const body = `{"offsets":[{"partition":{"server":"demo-shipments"},"offset":{"lsn":2784740576,"ts_usec":1796212644003727}},
		{"partition":{"server":"demo-invoices"},"offset":{"ts_sec":1796213073,"file":"mariadb-bin.000001","pos":74257,"gtids":"0-1-109","server_id":1,"event":3}}]}`
	var res struct{ Offsets []Offset }
	if err := json.Unmarshal([]byte(body), &res); err != nil {
		t.Fatal(err)
	}
	got, ok := BinlogOffset(res.Offsets)
	want := BinlogPosition{File: "mariadb-bin.000001", Pos: 74257, EventsAt: time.Unix(1796213073, 0)}
	if !ok || got != want {
		t.Errorf("BinlogOffset = %+v, %t; want %+v, true", got, ok, want)
	}
	if got, ok := BinlogOffset(res.Offsets[:1]); ok {
		t.Errorf("a PostgreSQL connector's offsets gave a binlog position %+v", got)
	}
}

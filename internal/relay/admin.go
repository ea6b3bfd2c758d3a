package relay

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// AdminState is the JSON body of every admin endpoint.
type AdminState struct {
	Paused bool `json:"paused"`
	// PublishDelay and MarkDelay are Go durations ("250ms", "0s").
	PublishDelay  string `json:"publish_delay"`
	MarkDelay     string `json:"mark_delay"`
	DropNext      int    `json:"drop_next"`
	DuplicateNext int    `json:"duplicate_next"`
}

// NewAdminHandler serves the relay's admin API, its metrics and its health:
//
//	GET  /admin/state            current faults
//	POST /admin/pause            stop claiming rows
//	POST /admin/resume           claim rows again
//	POST /admin/delay?d=250ms    sleep d between read and send (d=0 clears)
//	POST /admin/mark-delay?d=1s  mark published_at d after the batch's ack (d=0: at once)
//	POST /admin/drop?n=2         mark the next n rows published without sending (n defaults to 1, 0 clears)
//	POST /admin/duplicate?n=2    send the next n rows twice (n defaults to 1, 0 clears)
//	GET  /metrics                metrics from gatherer
//	GET  /healthz                200 while the process serves
//
// Every /admin endpoint answers with the resulting AdminState as JSON, or
// with 400 and {"error": "..."} for a bad parameter.
func NewAdminHandler(f *Faults, gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	state := func(w http.ResponseWriter, _ *http.Request) { writeState(w, f) }
	mux.HandleFunc("GET /admin/state", state)
	mux.HandleFunc("POST /admin/pause", func(w http.ResponseWriter, r *http.Request) {
		f.Pause()
		writeState(w, f)
	})
	mux.HandleFunc("POST /admin/resume", func(w http.ResponseWriter, r *http.Request) {
		f.Resume()
		writeState(w, f)
	})
	mux.HandleFunc("POST /admin/delay", durationHandler(f, f.SetPublishDelay))
	mux.HandleFunc("POST /admin/mark-delay", durationHandler(f, f.SetMarkDelay))
	mux.HandleFunc("POST /admin/drop", countHandler(f, f.DropNext))
	mux.HandleFunc("POST /admin/duplicate", countHandler(f, f.DuplicateNext))
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

func durationHandler(f *Faults, set func(time.Duration) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		raw := r.URL.Query().Get("d")
		if raw == "" {
			writeError(w, errors.New(`query parameter "d" is required, a Go duration such as 250ms`))
			return
		}
		d, err := time.ParseDuration(raw)
		if err == nil {
			err = set(d)
		}
		if err != nil {
			writeError(w, fmt.Errorf(`query parameter "d": %w`, err))
			return
		}
		writeState(w, f)
	}
}

func countHandler(f *Faults, set func(int) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		n := 1
		if raw := r.URL.Query().Get("n"); raw != "" {
			var err error
			if n, err = strconv.Atoi(raw); err != nil {
				writeError(w, fmt.Errorf(`query parameter "n": %w`, err))
				return
			}
		}
		if err := set(n); err != nil {
			writeError(w, fmt.Errorf(`query parameter "n": %w`, err))
			return
		}
		writeState(w, f)
	}
}

func writeState(w http.ResponseWriter, f *Faults) {
	s := f.State()
	writeJSON(w, http.StatusOK, AdminState{
		Paused:        s.Paused,
		PublishDelay:  s.PublishDelay.String(),
		MarkDelay:     s.MarkDelay.String(),
		DropNext:      s.DropNext,
		DuplicateNext: s.DuplicateNext,
	})
}

func writeError(w http.ResponseWriter, err error) {
	writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

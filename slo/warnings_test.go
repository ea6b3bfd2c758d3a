package slo

import (
	"strings"
	"testing"
	"time"
)

func TestWarnings(t *testing.T) {
	for _, tc := range []struct {
		name   string
		extra  string
		want   []string // substrings, one per warning, in order
		window []time.Duration
	}{
		{
			name:  "a canary every second at 99.9% is judged on every window",
			extra: "    canary: {schedule: \"@every 1s\"}\n",
		},
		{
			name:  "a canary every 4s at 99.9% is just enough for the 5m window (75 canaries, one is 1.33% < 1.44%)",
			extra: "    canary: {schedule: \"@every 4s\"}\n",
		},
		{
			name:  "a canary every 5s at 99.9% crosses the 5m window's threshold with one bad canary, which is the short window's design: no warning",
			extra: "    canary: {schedule: \"@every 5s\"}\n",
		},
		{
			name:  "a canary every minute at 99.9% fires the 1h page on one slow canary, on a full window and a fresh Prometheus alike, and says which rate or objective would not",
			extra: "    canary: {schedule: \"@every 1m\"}\n",
			want: []string{
				`a canary every 1m is 60 canaries per 1h; one bad canary (1.67%) is already over the page threshold 14.4 x (1 - 0.999) = 1.44% on the 1h window, so a single slow canary fires the alert, on a full window and on a fresh Prometheus alike; send a canary at least every 51s (canary.schedule "@every 51s"), or lower slo.objective to 99.88 or less`,
			},
			window: []time.Duration{time.Hour},
		},
		{
			name:  "a canary every 51s at 99.9% is one bad canary of 70.6 in the hour (1.42%, under 1.44%): the 1h pair needs two, no warning",
			extra: "    canary: {schedule: \"@every 51s\"}\n",
		},
		{
			name:  "a canary every 10m at 99.9% leaves the 5m short window empty between canaries and fires every page and ticket on one bad canary",
			extra: "    canary: {schedule: \"@every 10m\"}\n",
			want: []string{
				"one bad canary (16.67%) is already over the page threshold 14.4 x (1 - 0.999) = 1.44% on the 1h window",
				"a canary every 10m is less than one per 5m, so the 5m short window of the 1h/5m page is empty between two canaries",
				"one bad canary (2.78%) is already over the page threshold 6 x (1 - 0.999) = 0.6% on the 6h window",
				"one bad canary (0.69%) is already over the ticket threshold 3 x (1 - 0.999) = 0.3% on the 1d window",
				"one bad canary (0.23%) is already over the ticket threshold 1 x (1 - 0.999) = 0.1% on the 3d window",
			},
			window: []time.Duration{time.Hour, 5 * time.Minute, 6 * time.Hour, 24 * time.Hour, 72 * time.Hour},
		},
		{
			name:  "a canary every 5s is plenty at 99%",
			extra: "    canary: {schedule: \"@every 5s\"}\n    slo: {objective: 99}\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := FromConfig(loadConfig(t, tc.extra))
			if err != nil {
				t.Fatal(err)
			}
			got := Warnings(m)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d warnings, want %d:\n%v", len(got), len(tc.want), got)
			}
			for i, w := range got {
				if !strings.Contains(w.Message, tc.want[i]) {
					t.Errorf("warning %d:\n got %s\nwant it to contain %s", i, w.Message, tc.want[i])
				}
				if w.Window != tc.window[i] {
					t.Errorf("warning %d: window %s, want %s", i, w.Window, tc.window[i])
				}
				if got, want := strings.Join(w.Segments, ","), "commit_to_publish,end_to_end"; got != want {
					t.Errorf("warning %d: segments %s, want %s (one warning for every SLO it concerns)", i, got, want)
				}
			}
		})
	}
}

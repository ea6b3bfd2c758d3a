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
			name:  "a canary every 5s at 99.9% cannot judge the 5m window and says which rate or objective would",
			extra: "    canary: {schedule: \"@every 5s\"}\n",
			want: []string{
				`a canary every 5s is 60 canaries per 5m; one bad canary (1.67%) is already over the page threshold 14.4 x (1 - 0.999) = 1.44% on the 5m window, so the window cannot tell a blip from a burn: one slow canary keeps the alert firing; send a canary at least every 4s (canary.schedule "@every 4s"), or lower slo.objective to 99.88 or less`,
			},
			window: []time.Duration{5 * time.Minute},
		},
		{
			name:  "a canary every minute at 99.9% fires the 1h page on one slow canary and blurs four short windows",
			extra: "    canary: {schedule: \"@every 1m\"}\n",
			want: []string{
				"a canary every 1m is 60 canaries per 1h; one bad canary (1.67%) is already over the page threshold 14.4 x (1 - 0.999) = 1.44% on the 1h window, so a single slow canary fires the alert; send a canary at least every 51s",
				"one bad canary (20%) is already over the page threshold 14.4 x (1 - 0.999) = 1.44% on the 5m window",
				"one bad canary (3.33%) is already over the page threshold 6 x (1 - 0.999) = 0.6% on the 30m window",
				"one bad canary (0.83%) is already over the ticket threshold 3 x (1 - 0.999) = 0.3% on the 2h window",
				"one bad canary (0.28%) is already over the ticket threshold 1 x (1 - 0.999) = 0.1% on the 6h window",
			},
			window: []time.Duration{time.Hour, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 6 * time.Hour},
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

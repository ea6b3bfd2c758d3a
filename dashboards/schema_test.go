package dashboards

import (
	"errors"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// The generated JSON reads back into the SDK's dashboard schema strictly
// (no unknown or mistyped field) and validates: what Grafana will load is
// a well-formed dashboard, not just well-formed JSON.
func TestDashboardsConformToTheSchema(t *testing.T) {
	plugins.RegisterDefaultPlugins()
	for _, path := range configs {
		for _, f := range generate(t, path) {
			if !strings.HasSuffix(f.Name, ".json") {
				continue
			}
			var d dashboard.Dashboard
			if err := realError(d.UnmarshalJSONStrict(f.Data)); err != nil {
				t.Errorf("%s %s: %v", path, f.Name, err)
				continue
			}
			if err := realError(d.Validate()); err != nil {
				t.Errorf("%s %s: %v", path, f.Name, err)
			}
		}
	}
}

// The strict decoder must be able to fail, or the test above proves nothing.
func TestStrictDecodingRejectsAMisspeltPanelField(t *testing.T) {
	plugins.RegisterDefaultPlugins()
	var d dashboard.Dashboard
	if err := realError(d.UnmarshalJSONStrict([]byte(`{"title": "x", "schemaVersion": 42, "templating": {}, "annotations": {}, "panels": [{"type": "timeseries", "id": 1, "gridPoss": {}}]}`))); err == nil {
		t.Fatal("a misspelt panel field was accepted")
	}
}

// realError undoes a quirk of the SDK (v0.0.22): it returns an empty
// cog.BuildErrors as a non-nil error when all went well.
func realError(err error) error {
	var be cog.BuildErrors
	if errors.As(err, &be) && len(be) == 0 {
		return nil
	}
	return err
}

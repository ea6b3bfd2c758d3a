package dashboards

import (
	"bytes"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// Provisioning file names, relative to the output directory. They go in
// Grafana's provisioning/dashboards and provisioning/datasources
// directories.
const (
	ProvisioningDashboards  = "provisioning/dashboards/outbox-canary.yml"
	ProvisioningDatasources = "provisioning/datasources/outbox-canary-prometheus.yml"
)

// The provisioning schema (apiVersion 1), the fields we set.
type dashboardProviders struct {
	APIVersion int                 `yaml:"apiVersion"`
	Providers  []dashboardProvider `yaml:"providers"`
}

type dashboardProvider struct {
	Name                  string          `yaml:"name"`
	OrgID                 int             `yaml:"orgId"`
	Folder                string          `yaml:"folder"`
	FolderUID             string          `yaml:"folderUid"`
	Type                  string          `yaml:"type"`
	DisableDeletion       bool            `yaml:"disableDeletion"`
	AllowUIUpdates        bool            `yaml:"allowUiUpdates"`
	UpdateIntervalSeconds int             `yaml:"updateIntervalSeconds"`
	Options               providerOptions `yaml:"options"`
}

type providerOptions struct {
	Path string `yaml:"path"`
}

type datasources struct {
	APIVersion  int             `yaml:"apiVersion"`
	Datasources []datasourceDef `yaml:"datasources"`
}

type datasourceDef struct {
	Name      string         `yaml:"name"`
	Type      string         `yaml:"type"`
	UID       string         `yaml:"uid"`
	Access    string         `yaml:"access"`
	URL       string         `yaml:"url"`
	IsDefault bool           `yaml:"isDefault"`
	JSONData  datasourceJSON `yaml:"jsonData"`
}

type datasourceJSON struct {
	HTTPMethod   string `yaml:"httpMethod"`
	TimeInterval string `yaml:"timeInterval"`
}

func provisioning(opts Options) ([]File, error) {
	if opts.DashboardsPath == "" || opts.Folder == "" || opts.PrometheusURL == "" {
		return nil, fmt.Errorf("provisioning: the dashboards path, folder and Prometheus URL are required")
	}
	dash, err := yamlFile(`Grafana dashboard provider for the outbox-canary dashboards.
Copy this file to Grafana's provisioning/dashboards directory and the
dashboard JSON files to `+opts.DashboardsPath+`.
The dashboards are generated: allowUiUpdates is off so that a change made in
the UI cannot silently diverge from the configuration; change the
configuration and run outbox-canary dashboards again instead.`,
		dashboardProviders{APIVersion: 1, Providers: []dashboardProvider{{
			Name:                  "outbox-canary",
			OrgID:                 1,
			Folder:                opts.Folder,
			FolderUID:             slug(opts.Folder),
			Type:                  "file",
			DisableDeletion:       false,
			AllowUIUpdates:        false,
			UpdateIntervalSeconds: 30,
			Options:               providerOptions{Path: opts.DashboardsPath},
		}}})
	if err != nil {
		return nil, fmt.Errorf("provisioning %s: %w", ProvisioningDashboards, err)
	}
	ds, err := yamlFile(`An example Prometheus datasource for the outbox-canary dashboards. They
pick their datasource with a variable, so any Prometheus that scrapes
outbox-canary and loads the rules of outbox-canary rules will do.
Set timeInterval to the scrape interval: $__rate_interval is derived from it.`,
		datasources{APIVersion: 1, Datasources: []datasourceDef{{
			Name:      "Prometheus",
			Type:      "prometheus",
			UID:       "prometheus",
			Access:    "proxy",
			URL:       opts.PrometheusURL,
			IsDefault: true,
			JSONData:  datasourceJSON{HTTPMethod: "POST", TimeInterval: "15s"},
		}}})
	if err != nil {
		return nil, fmt.Errorf("provisioning %s: %w", ProvisioningDatasources, err)
	}
	return []File{{Name: ProvisioningDashboards, Data: dash}, {Name: ProvisioningDatasources, Data: ds}}, nil
}

// yamlFile is v as YAML under a comment header that starts with the
// generated notice.
func yamlFile(about string, v any) ([]byte, error) {
	var buf bytes.Buffer
	for _, line := range strings.Split(GeneratedNotice+"\n"+about, "\n") {
		buf.WriteString(strings.TrimRight("# "+line, " ") + "\n")
	}
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// slug makes a Grafana UID of a name: lower case, [a-z0-9-] only.
func slug(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	return b.String()
}

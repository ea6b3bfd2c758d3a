package connect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
)

// ErrNoConnector: Kafka Connect answered that it has no connector of that
// name (404).
var ErrNoConnector = errors.New("no such connector")

// QueryConfig asks for a connector's configuration
// (GET /connectors/{name}/config). The configuration holds secrets as the
// user wrote them (database.password, unless a config provider hides it):
// never log it whole.
func QueryConfig(ctx context.Context, client *http.Client, baseURL, connector string) (map[string]string, error) {
	body, err := get(ctx, client, strings.TrimRight(baseURL, "/")+"/connectors/"+url.PathEscape(connector)+"/config")
	if err != nil {
		return nil, fmt.Errorf("connector %s: %w", connector, err)
	}
	var cfg map[string]string
	if err := json.Unmarshal(body, &cfg); err != nil {
		return nil, fmt.Errorf("connector %s: decode config: %w", connector, err)
	}
	return cfg, nil
}

// QueryConfigs asks for the configuration of every connector of the
// Connect cluster (GET /connectors?expand=info), by connector name.
func QueryConfigs(ctx context.Context, client *http.Client, baseURL string) (map[string]map[string]string, error) {
	body, err := get(ctx, client, strings.TrimRight(baseURL, "/")+"/connectors?expand=info")
	if err != nil {
		return nil, fmt.Errorf("list connectors: %w", err)
	}
	var all map[string]struct {
		Info struct {
			Config map[string]string `json:"config"`
		} `json:"info"`
	}
	if err := json.Unmarshal(body, &all); err != nil {
		return nil, fmt.Errorf("list connectors: decode: %w", err)
	}
	out := make(map[string]map[string]string, len(all))
	for name, c := range all {
		out[name] = c.Info.Config
	}
	return out, nil
}

// get reads one resource of the REST API; a 404 is ErrNoConnector.
func get(ctx context.Context, client *http.Client, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	res, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("Kafka Connect unreachable: %w", err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", u, err)
	}
	switch {
	case res.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("%w: Kafka Connect answered %s: %s", ErrNoConnector, res.Status, strings.TrimSpace(string(body)))
	case res.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("Kafka Connect answered %s: %s", res.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// javaClass matches a fully qualified Java class name at the start of a
// trace line, to shorten it to the class's simple name.
var javaClass = regexp.MustCompile(`^(?:[a-zA-Z_$][\w$]*\.)+([A-Z][\w$]*)`)

// maxCauseLen bounds each part of a trace summary.
const maxCauseLen = 240

// TraceSummary shortens a Java stack trace as Kafka Connect reports it for
// a failed task to one line: the exception and each "Caused by", simple
// class names, no stack frames. "ConnectException: Unrecoverable exception
// from producer send callback; caused by: TimeoutException: Topic x not
// present in metadata after 60000 ms."
func TraceSummary(trace string) string {
	var parts []string
	for i, line := range strings.Split(trace, "\n") {
		line = strings.TrimSpace(line)
		cause, isCause := strings.CutPrefix(line, "Caused by: ")
		if i > 0 && !isCause {
			continue
		}
		if i == 0 && line == "" {
			continue
		}
		cause = javaClass.ReplaceAllString(cause, "$1")
		if len(cause) > maxCauseLen {
			cause = cause[:maxCauseLen] + "..."
		}
		parts = append(parts, cause)
	}
	return strings.Join(parts, "; caused by: ")
}

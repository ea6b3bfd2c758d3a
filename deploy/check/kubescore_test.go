package check

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// kubeScoreModule is the kube-score release the chart is held to. It runs
// with `go run`, in its own module: kube-score v1.20.0 still imports
// k8s.io/api/autoscaling/v2beta2, which the k8s.io/api that Helm needs
// (v0.37) no longer has, so it cannot be linked into this test binary.
// `go run` caches the built executable: after the first build it starts in
// about half a second.
const kubeScoreModule = "github.com/zegl/kube-score/cmd/kube-score@v1.20.0"

// kubeScoreArgs is kube-score's default run with two choices of ours:
//   - no CPU limit is required: CFS throttling would pause the prober
//     between the events it stamps and add the pause to the lag it reports
//     (values.yaml says so where resources are set);
//   - the seccomp check, optional in kube-score, is on: the chart meets it.
//
// Deployment Strategy (Recreate) and Deployment Replicas (1) stay on and
// warn: one prober per environment is the design (see the chart README).
var kubeScoreArgs = []string{
	"score",
	"--ignore-container-cpu-limit",
	"--enable-optional-test", "container-seccomp-profile",
	"--kubernetes-version", "v1.30",
	"--output-format", "human",
	"--color", "never",
	"-",
}

// kubeScore scores a manifest and returns kube-score's report and whether
// it graded anything CRITICAL (kube-score exits 1 then).
func kubeScore(manifest string) (report string, critical bool, err error) {
	cmd := exec.Command("go", append([]string{"run", kubeScoreModule}, kubeScoreArgs...)...)
	cmd.Stdin = strings.NewReader(manifest)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), false, nil
	case errors.As(err, &exit) && exit.ExitCode() == 1 && stdout.Len() > 0:
		return stdout.String(), true, nil
	default:
		return "", false, fmt.Errorf("go run %s: %w\n%s", kubeScoreModule, err, stderr.String())
	}
}

// buildKubeScore builds kube-score once, before the parallel runs below
// would each build it.
var buildKubeScore = sync.OnceValues(func() ([]byte, error) {
	return exec.Command("go", "run", kubeScoreModule, "version").CombinedOutput()
})

func TestKubeScoreFindsNothingCritical(t *testing.T) {
	if out, err := buildKubeScore(); err != nil {
		t.Fatalf("go run %s version: %v\n%s", kubeScoreModule, err, out)
	}
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			t.Parallel() // each kube-score run is a process of its own
			manifest, err := renderChart(vs.values)
			if err != nil {
				t.Fatal(err)
			}
			report, critical, err := kubeScore(manifest)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("kube-score %s:\n%s", strings.Join(kubeScoreArgs, " "), report)
			if critical {
				t.Error("kube-score graded something CRITICAL (report above)")
			}
		})
	}
}

// TestKubeScoreCatchesAnInsecurePod keeps the check above honest: the same
// run must grade a pod without a security context CRITICAL.
func TestKubeScoreCatchesAnInsecurePod(t *testing.T) {
	manifest := `apiVersion: apps/v1
kind: Deployment
metadata: {name: insecure}
spec:
  replicas: 1
  selector: {matchLabels: {app: insecure}}
  template:
    metadata: {labels: {app: insecure}}
    spec:
      containers: [{name: app, image: "example/app:latest"}]
`
	report, critical, err := kubeScore(manifest)
	if err != nil {
		t.Fatal(err)
	}
	if !critical {
		t.Errorf("kube-score found nothing critical in an insecure pod:\n%s", report)
	}
}

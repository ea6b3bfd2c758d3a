package check

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/outbox-canary/outbox-canary/internal/config"
	"github.com/outbox-canary/outbox-canary/internal/shard"
)

// envOf returns a container's environment: values, and "fieldRef:<path>"
// for the downward API.
func envOf(c corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			env[e.Name] = "fieldRef:" + e.ValueFrom.FieldRef.FieldPath
		default:
			env[e.Name] = e.Value
		}
	}
	return env
}

// renderedPipelines returns the names of the pipelines of the rendered
// configuration, loaded by the service's own loader.
func renderedPipelines(t *testing.T, objects []object) []string {
	t.Helper()
	for _, cm := range all[*corev1.ConfigMap](objects) {
		if text, ok := cm.Data["outbox-canary.yml"]; ok {
			cfg, err := config.Load([]byte(text))
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, p := range cfg.Pipelines {
				names = append(names, p.Name)
			}
			return names
		}
	}
	t.Fatal("no ConfigMap holds outbox-canary.yml")
	return nil
}

func TestFleetModes(t *testing.T) {
	for _, tc := range []struct {
		name             string
		values           chartValues
		shards, replicas int
		names            []string // the StatefulSets
	}{
		{name: "Redundant: one StatefulSet of two probers, each measuring every pipeline.", values: redundantValues,
			shards: 1, replicas: 2, names: []string{"canary-outbox-canary"}},
		{name: "Sharded: three StatefulSets of two probers, one per shard.", values: shardedValues,
			shards: 3, replicas: 2, names: []string{"canary-outbox-canary-shard-0", "canary-outbox-canary-shard-1", "canary-outbox-canary-shard-2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objects := renderObjects(t, tc.values)
			if n := len(all[*appsv1.Deployment](objects)); n != 0 {
				t.Errorf("%d Deployments rendered beside the StatefulSets, want none", n)
			}
			if n := len(all[*corev1.PersistentVolumeClaim](objects)); n != 0 {
				t.Errorf("%d standalone PersistentVolumeClaims, want none: each pod has its own from volumeClaimTemplates", n)
			}
			services := map[string]*corev1.Service{}
			for _, s := range all[*corev1.Service](objects) {
				services[s.Name] = s
			}
			sets := all[*appsv1.StatefulSet](objects)
			var gotNames []string
			pdbs := all[*policyv1.PodDisruptionBudget](objects)
			pipelines := renderedPipelines(t, objects)
			measuredBy := map[string]int{} // pipeline -> probers measuring it
			for i, s := range sets {
				gotNames = append(gotNames, s.Name)
				pod := s.Spec.Template
				if s.Spec.Replicas == nil || int(*s.Spec.Replicas) != tc.replicas {
					t.Errorf("%s: replicas %v, want %d", s.Name, s.Spec.Replicas, tc.replicas)
				}
				if svc, ok := services[s.Spec.ServiceName]; !ok || svc.Spec.ClusterIP != corev1.ClusterIPNone {
					t.Errorf("%s: serviceName %q is not a headless Service of the release", s.Name, s.Spec.ServiceName)
				}
				selector := labels.SelectorFromSet(s.Spec.Selector.MatchLabels)
				if !selector.Matches(labels.Set(pod.Labels)) {
					t.Errorf("%s: its selector %s does not match its pods' labels %v", s.Name, selector, pod.Labels)
				}
				// Every pod's state is its own: a claim per pod, mounted as "state".
				if len(s.Spec.VolumeClaimTemplates) != 1 || s.Spec.VolumeClaimTemplates[0].Name != "state" {
					t.Errorf("%s: volumeClaimTemplates %v, want one named state", s.Name, s.Spec.VolumeClaimTemplates)
				}
				for _, v := range pod.Spec.Volumes {
					if v.Name == "state" {
						t.Errorf("%s: the pod template has a state volume %+v: the pods would share it", s.Name, v.VolumeSource)
					}
				}
				// Its own instance id, and its shard, from the environment.
				c := pod.Spec.Containers[0]
				env := envOf(c)
				if got := env["OUTBOX_CANARY_INSTANCE_ID"]; got != "fieldRef:metadata.name" {
					t.Errorf("%s: OUTBOX_CANARY_INSTANCE_ID = %q, want the pod's name", s.Name, got)
				}
				count, index := 1, ""
				if tc.shards > 1 {
					count, _ = strconv.Atoi(env["OUTBOX_CANARY_SHARD_COUNT"])
					index = env["OUTBOX_CANARY_SHARD_INDEX"]
				}
				sh, err := shard.New(count, index, "")
				if err != nil {
					t.Fatalf("%s: the service would refuse its shard environment: %v", s.Name, err)
				}
				if sh.Index != i || sh.Count != tc.shards {
					t.Errorf("%s: shard %v, want %d of %d", s.Name, sh, i, tc.shards)
				}
				for _, p := range sh.Select(pipelines) {
					measuredBy[p] += int(*s.Spec.Replicas)
				}
				// The shard's replicas repel each other across nodes.
				aa := pod.Spec.Affinity
				if aa == nil || aa.PodAntiAffinity == nil || len(aa.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
					t.Errorf("%s: affinity %+v, want one preferred pod anti-affinity term", s.Name, aa)
				} else {
					term := aa.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
					if term.TopologyKey != "kubernetes.io/hostname" || !maps.Equal(term.LabelSelector.MatchLabels, s.Spec.Selector.MatchLabels) {
						t.Errorf("%s: anti-affinity on %s by %v, want the shard's own pods by host", s.Name, term.TopologyKey, term.LabelSelector.MatchLabels)
					}
				}
				// And a disruption takes one of them at a time.
				var budget *policyv1.PodDisruptionBudget
				for _, p := range pdbs {
					if labels.SelectorFromSet(p.Spec.Selector.MatchLabels).String() == selector.String() {
						budget = p
					}
				}
				if budget == nil || budget.Spec.MaxUnavailable == nil || budget.Spec.MaxUnavailable.IntValue() != 1 {
					t.Errorf("%s: no PodDisruptionBudget of maxUnavailable 1 selects exactly its pods (%d rendered)", s.Name, len(pdbs))
				}
			}
			if !slices.Equal(gotNames, tc.names) {
				t.Errorf("StatefulSets %v, want %v", gotNames, tc.names)
			}
			// The shards' selectors do not overlap: no pod is counted by two.
			for i := range sets {
				for j := range sets {
					if i != j && labels.SelectorFromSet(sets[i].Spec.Selector.MatchLabels).Matches(labels.Set(sets[j].Spec.Template.Labels)) {
						t.Errorf("%s selects the pods of %s", sets[i].Name, sets[j].Name)
					}
				}
			}
			for _, p := range pipelines {
				if measuredBy[p] != tc.replicas {
					t.Errorf("pipeline %s is measured by %d probers, want %d", p, measuredBy[p], tc.replicas)
				}
			}
			// The Service and the NetworkPolicy cover every prober.
			svc := services["canary-outbox-canary"]
			for _, s := range sets {
				if svc == nil || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(s.Spec.Template.Labels)) {
					t.Errorf("the Service does not select the pods of %s", s.Name)
				}
			}
		})
	}
}

// The chart's sharded mode over 30 pipelines: every pipeline measured by
// exactly the two probers of one shard, as the StatefulSets' environments
// tell the service.
func TestThirtyPipelinesOverThreeShardsOfTwoAreEachMeasuredTwice(t *testing.T) {
	var cfg strings.Builder
	cfg.WriteString("signing_key: {file: /etc/outbox-canary/secrets/signing-key}\npipelines:\n")
	for i := range 30 {
		fmt.Fprintf(&cfg, "  - {name: p%03d, database: {dsn: {file: /etc/outbox-canary/secrets/dsn}}, kafka: {brokers: [\"k:9092\"]}, budgets: {end_to_end: 2s}}\n", i)
	}
	objects := renderObjects(t, chartValues{set: []string{"fleet.shards=3", "fleet.replicas=2", "config=" + strings.ReplaceAll(cfg.String(), ",", `\,`)}})
	pipelines := renderedPipelines(t, objects)
	if len(pipelines) != 30 {
		t.Fatalf("the rendered config has %d pipelines, want 30", len(pipelines))
	}
	probers := map[string][]string{}
	for _, s := range all[*appsv1.StatefulSet](objects) {
		env := envOf(s.Spec.Template.Spec.Containers[0])
		count, _ := strconv.Atoi(env["OUTBOX_CANARY_SHARD_COUNT"])
		sh, err := shard.New(count, env["OUTBOX_CANARY_SHARD_INDEX"], "")
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		for r := range int(*s.Spec.Replicas) {
			pod := fmt.Sprintf("%s-%d", s.Name, r)
			for _, p := range sh.Select(pipelines) {
				probers[p] = append(probers[p], pod)
			}
		}
	}
	for _, p := range pipelines {
		if len(probers[p]) != 2 {
			t.Errorf("pipeline %s is measured by %v, want exactly two probers", p, probers[p])
		}
	}
}

func TestFleetOptions(t *testing.T) {
	t.Run("hard anti-affinity is required, not preferred.", func(t *testing.T) {
		s := only[*appsv1.StatefulSet](t, renderObjects(t, chartValues{set: []string{"fleet.replicas=2", "fleet.antiAffinity=hard"}}))
		aa := s.Spec.Template.Spec.Affinity.PodAntiAffinity
		if len(aa.RequiredDuringSchedulingIgnoredDuringExecution) != 1 || len(aa.PreferredDuringSchedulingIgnoredDuringExecution) != 0 {
			t.Errorf("anti-affinity %+v, want one required term", aa)
		}
	})
	t.Run("Without persistence each pod's state is an emptyDir and no claim is templated.", func(t *testing.T) {
		s := only[*appsv1.StatefulSet](t, renderObjects(t, chartValues{set: []string{"fleet.replicas=2", "persistence.enabled=false"}}))
		if len(s.Spec.VolumeClaimTemplates) != 0 {
			t.Errorf("volumeClaimTemplates %v, want none", s.Spec.VolumeClaimTemplates)
		}
		found := false
		for _, v := range s.Spec.Template.Spec.Volumes {
			found = found || v.Name == "state" && v.EmptyDir != nil
		}
		if !found {
			t.Error("no emptyDir state volume")
		}
	})
	t.Run("Shards of one replica get no PodDisruptionBudget, which could only block drains.", func(t *testing.T) {
		objects := renderObjects(t, chartValues{set: []string{"fleet.shards=2"}})
		if n := len(all[*appsv1.StatefulSet](objects)); n != 2 {
			t.Errorf("%d StatefulSets, want 2", n)
		}
		if n := len(all[*policyv1.PodDisruptionBudget](objects)); n != 0 {
			t.Errorf("%d PodDisruptionBudgets, want none", n)
		}
	})
	t.Run("The user's own affinity replaces the generated anti-affinity.", func(t *testing.T) {
		s := only[*appsv1.StatefulSet](t, renderObjects(t, chartValues{set: []string{"fleet.replicas=2",
			"affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=pool",
			"affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists"}}))
		if a := s.Spec.Template.Spec.Affinity; a == nil || a.NodeAffinity == nil || a.PodAntiAffinity != nil {
			t.Errorf("affinity %+v, want the user's node affinity alone", a)
		}
	})
}

func TestFleetRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  []string
		want string
	}{
		{"Zero shards are refused by the values schema.", []string{"fleet.shards=0"}, "/fleet/shards"},
		{"Zero replicas are refused by the values schema.", []string{"fleet.replicas=0"}, "/fleet/replicas"},
		{"An unknown anti-affinity is refused by the values schema.", []string{"fleet.replicas=2", "fleet.antiAffinity=strict"}, "/fleet/antiAffinity"},
		{"One existing claim for several probers is refused.", []string{"fleet.replicas=2", "persistence.existingClaim=mine"},
			"persistence.existingClaim: one claim cannot hold the state of several probers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderChart(chartValues{set: tc.set})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("render error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// The rules expect alerting.replicas probers per shard: a chart that runs
// another number says so after the install, in both directions, and says
// nothing when they agree.
func TestNotesWarnWhenTheRulesExpectAnotherNumberOfReplicas(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  []string
		want string
	}{
		{"Two replicas, rules for one: the loss of one goes unticketed.", []string{"fleet.replicas=2"},
			"fleet.replicas is 2 but the configuration's alerting.replicas is 1"},
		{"One replica, rules for two: a ticket for a replica never deployed.", []string{"config.alerting.replicas=2"},
			"they raise OutboxCanaryRedundancyLost for replicas that were never deployed"},
		{"Three replicas, rules for three: no warning.", []string{"fleet.replicas=3", "config.alerting.replicas=3"}, ""},
		{"One replica, rules unset: no warning.", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rel, err := renderRelease(chartValues{set: tc.set})
			if err != nil {
				t.Fatal(err)
			}
			notes := rel.Info.Notes
			switch {
			case tc.want == "" && strings.Contains(notes, "WARNING"):
				t.Errorf("NOTES warn, want no warning:\n%s", notes)
			case tc.want != "" && !strings.Contains(notes, tc.want):
				t.Errorf("NOTES lack %q:\n%s", tc.want, notes)
			case tc.want != "" && !strings.Contains(notes, "Set alerting.replicas:"):
				t.Errorf("NOTES do not say what to set:\n%s", notes)
			}
		})
	}
}

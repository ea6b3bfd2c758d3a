package check

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The External Secrets Operator publishes its API types only inside its
// main module (apis/ became a nested module that is not tagged on the Go
// module proxy), and that module pulls in every secret provider's SDK. So
// the ExternalSecret the chart renders is decoded strictly into this copy of
// the external-secrets.io/v1 fields the chart can produce (names and JSON
// keys as in externalsecret_types.go of external-secrets v0.16.2, read from
// the module proxy); a field outside them fails the test.

const externalSecretAPIVersion = "external-secrets.io/v1"

type externalSecret struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              externalSecretSpec `json:"spec"`
}

type externalSecretSpec struct {
	SecretStoreRef  secretStoreRef       `json:"secretStoreRef"`
	Target          externalSecretTarget `json:"target"`
	RefreshPolicy   string               `json:"refreshPolicy,omitempty"`
	RefreshInterval *metav1.Duration     `json:"refreshInterval,omitempty"`
	Data            []externalSecretData `json:"data,omitempty"`
}

type secretStoreRef struct {
	Name string `json:"name,omitempty"`
	Kind string `json:"kind,omitempty"`
}

type externalSecretTarget struct {
	Name           string `json:"name,omitempty"`
	CreationPolicy string `json:"creationPolicy,omitempty"`
	DeletionPolicy string `json:"deletionPolicy,omitempty"`
	Immutable      bool   `json:"immutable,omitempty"`
}

type externalSecretData struct {
	SecretKey string                `json:"secretKey"`
	RemoteRef externalSecretDataRef `json:"remoteRef"`
}

type externalSecretDataRef struct {
	Key                string `json:"key"`
	MetadataPolicy     string `json:"metadataPolicy,omitempty"`
	Property           string `json:"property,omitempty"`
	Version            string `json:"version,omitempty"`
	ConversionStrategy string `json:"conversionStrategy,omitempty"`
	DecodingStrategy   string `json:"decodingStrategy,omitempty"`
}

// DeepCopyObject makes externalSecret a runtime.Object; the tests only read it.
func (e *externalSecret) DeepCopyObject() runtime.Object {
	c := *e
	return &c
}

package hookauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/proxy-operator/proxy-operator/internal/kube"
)

// The Secrets the shipped install names in its CompositeControllers' endpointConfigs
// (metacontroller/install/compositecontroller*.yaml) and in the operator's Role.
const (
	// TLSSecret holds ca.crt (what Metacontroller verifies with: caBundle.secretRef), tls.crt
	// and tls.key (what the listener serves).
	TLSSecret = "proxy-operator-hooks-tls"
	// TokenSecret holds the bearer token under TokenKey (authorization.secretRef).
	TokenSecret = "proxy-operator-hooks-token"
	TokenKey    = "token"
	// DefaultService is the hook Service of the install, whose DNS names the certificate
	// carries.
	DefaultService = "proxy-operator-hooks"
	// CredentialsAnnotation is set on each CompositeController to the two Secrets' UIDs once
	// they exist (Touch).
	CredentialsAnnotation = "proxy-operator.crawl.example.com/hook-credentials"
	// validity is how long the generated CA and certificate are valid: rotation is by
	// deleting the Secrets (decision 0181), not by expiry.
	validity = 10 * 365 * 24 * time.Hour
)

// DefaultControllers are the install's CompositeControllers that call the hooks.
var DefaultControllers = []string{"proxy-operator", "proxy-operator-pools"}

// CompositeControllerResource is Metacontroller's CompositeController (cluster-scoped).
var CompositeControllerResource = schema.GroupVersionResource{Group: "metacontroller.k8s.io", Version: "v1alpha1", Resource: "compositecontrollers"}

// SecretsConfig says where the Secrets live and who is told about them.
type SecretsConfig struct {
	// Dynamic reads and writes the Secrets and annotates the CompositeControllers.
	Dynamic dynamic.Interface
	// Namespace holds both Secrets (the operator's own, POD_NAMESPACE).
	Namespace string
	// Service is the hook Service's name (DefaultService when empty).
	Service string
	// Controllers are annotated once the Secrets exist (nil: DefaultControllers; empty
	// non-nil: none).
	Controllers []string
	Log         *slog.Logger
	// Now is the clock the certificates start from (nil: time.Now).
	Now func() time.Time
}

// DNSNames are the names the serving certificate is valid for: the Service's, short and
// qualified, as a webhook URL may spell it.
func DNSNames(service, namespace string) []string {
	return []string{service, service + "." + namespace, service + "." + namespace + ".svc", service + "." + namespace + ".svc.cluster.local"}
}

// EnsureSecrets returns the hook credentials kept in the two Secrets, creating each one that
// does not exist yet. Creation is create-if-absent: when another replica (or an earlier run)
// created one first, its content is read and used, so every replica serves the same
// certificate and token. A Secret that exists but cannot be used is an error naming it (delete
// it to have a new one made). Then Touch tells the CompositeControllers.
func EnsureSecrets(ctx context.Context, c SecretsConfig) (*Credentials, error) {
	if c.Service == "" {
		c.Service = DefaultService
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Controllers == nil {
		c.Controllers = DefaultControllers
	}
	tlsSec, err := ensure(ctx, c, TLSSecret, func() (*corev1.Secret, error) {
		ca, cert, key, err := Generate(DNSNames(c.Service, c.Namespace), c.Now())
		if err != nil {
			return nil, err
		}
		return &corev1.Secret{Type: corev1.SecretTypeTLS, Data: map[string][]byte{"ca.crt": ca, corev1.TLSCertKey: cert, corev1.TLSPrivateKeyKey: key}}, nil
	})
	if err != nil {
		return nil, err
	}
	tokSec, err := ensure(ctx, c, TokenSecret, func() (*corev1.Secret, error) {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		return &corev1.Secret{Type: corev1.SecretTypeOpaque, Data: map[string][]byte{TokenKey: []byte(base64.RawURLEncoding.EncodeToString(b))}}, nil
	})
	if err != nil {
		return nil, err
	}
	creds, err := parse(tlsSec.Data[corev1.TLSCertKey], tlsSec.Data[corev1.TLSPrivateKeyKey], tlsSec.Data["ca.crt"], tokSec.Data[TokenKey],
		"Secret "+c.Namespace+"/"+TLSSecret+" (delete it to have a new one made)", "Secret "+c.Namespace+"/"+TokenSecret+" key "+TokenKey+" (delete it to have a new one made)")
	if err != nil {
		return nil, err
	}
	if len(creds.CA) == 0 {
		return nil, fmt.Errorf("%w: Secret %s/%s has no ca.crt (delete it to have a new one made)", ErrBadCredentials, c.Namespace, TLSSecret)
	}
	Touch(ctx, c.Dynamic, c.Controllers, string(tlsSec.UID)+"/"+string(tokSec.UID), c.Log)
	return creds, nil
}

// ensure gets the Secret name, or creates it from build when it does not exist; on a lost
// race it reads the winner's.
func ensure(ctx context.Context, c SecretsConfig, name string, build func() (*corev1.Secret, error)) (*corev1.Secret, error) {
	secrets := c.Dynamic.Resource(kube.SecretResource).Namespace(c.Namespace)
	get := func() (*corev1.Secret, error) {
		u, err := secrets.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		s := &corev1.Secret{}
		return s, kube.ToObject(u, s)
	}
	s, err := get()
	if err == nil {
		c.Log.Info("hook credentials Secret found", "namespace", c.Namespace, "name", name)
		return s, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("hookauth: reading Secret %s/%s: %w", c.Namespace, name, err)
	}
	s, err = build()
	if err != nil {
		return nil, fmt.Errorf("hookauth: generating Secret %s/%s: %w", c.Namespace, name, err)
	}
	s.Name, s.Namespace = name, c.Namespace
	s.Labels = map[string]string{"app.kubernetes.io/name": "proxy-operator", "app.kubernetes.io/component": "hook-credentials"}
	u, err := kube.FromObject(s, "Secret")
	if err != nil {
		return nil, err
	}
	created, err := secrets.Create(ctx, u, metav1.CreateOptions{})
	switch {
	case err == nil:
		c.Log.Info("hook credentials Secret created", "namespace", c.Namespace, "name", name)
		s := &corev1.Secret{}
		return s, kube.ToObject(created, s)
	case apierrors.IsAlreadyExists(err):
		if s, err = get(); err != nil {
			return nil, fmt.Errorf("hookauth: reading Secret %s/%s created meanwhile: %w", c.Namespace, name, err)
		}
		c.Log.Info("hook credentials Secret created by another process", "namespace", c.Namespace, "name", name)
		return s, nil
	}
	return nil, fmt.Errorf("hookauth: creating Secret %s/%s: %w", c.Namespace, name, err)
}

// Touch sets CredentialsAnnotation on each CompositeController to value. Metacontroller
// resolves caBundle and authorization only when it builds a controller; a controller that
// failed to build because a Secret did not exist yet is retried with backoff, and this
// update makes it reconcile again at once. It does not rebuild a running controller (an
// annotation is not spec); for Secrets created once that is what is wanted (decision 0181).
// A controller that does not exist or cannot be patched is logged, not an error: the hooks
// serve either way.
func Touch(ctx context.Context, dyn dynamic.Interface, controllers []string, value string, log *slog.Logger) {
	if dyn == nil {
		return
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{CredentialsAnnotation: value}}})
	for _, name := range controllers {
		_, err := dyn.Resource(CompositeControllerResource).Patch(ctx, name, k8stypes.MergePatchType, patch, metav1.PatchOptions{})
		switch {
		case err == nil:
			log.Info("CompositeController told of the hook credentials", "name", name)
		case apierrors.IsNotFound(err):
			log.Info("CompositeController not found; it reads the hook credentials when it is created", "name", name)
		default:
			log.Warn("cannot annotate CompositeController with the hook credentials; Metacontroller retries it with backoff", "name", name, "err", err)
		}
	}
}

// Generate makes a CA and a serving certificate it signs for dnsNames, both ECDSA P-256 and
// valid from now for ten years, and returns the CA's and the certificate's PEM and the
// certificate's PKCS#8 key. The CA's key is discarded: nothing else can ever be signed with
// it.
func Generate(dnsNames []string, now time.Time) (caPEM, certPEM, keyPEM []byte, err error) {
	if len(dnsNames) == 0 {
		return nil, nil, nil, errors.New("hookauth: a certificate needs at least one DNS name")
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	notBefore := now.Add(-time.Hour) // callers' clocks may lag
	ca := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "proxy-operator hooks CA"},
		NotBefore: notBefore, NotAfter: now.Add(validity),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return nil, nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	leaf := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: dnsNames[0]}, DNSNames: dnsNames,
		NotBefore: notBefore, NotAfter: now.Add(validity),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// serial is a random 128-bit certificate serial number.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

package temporaladapter

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/taskport/taskport/port"
)

// writeCert writes a self-signed certificate and its key as PEM files.
func writeCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "worker"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
	return certFile, keyFile
}

func TestClientTLSOptions(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeCert(t, dir)

	plain, err := ClientConfig{}.tlsConfig()
	require.NoError(t, err)
	require.Nil(t, plain, "no TLS setting: plaintext (the dev server)")

	cloud, err := ClientConfig{APIKey: "secret"}.tlsConfig()
	require.NoError(t, err)
	require.NotNil(t, cloud, "an API key implies TLS with the system roots")
	require.Nil(t, cloud.RootCAs)

	mtls, err := ClientConfig{CAFile: cert, CertFile: cert, KeyFile: key, ServerName: "ns.tmprl.cloud"}.tlsConfig()
	require.NoError(t, err)
	require.NotNil(t, mtls.RootCAs)
	presented, err := mtls.GetClientCertificate(&tls.CertificateRequestInfo{})
	require.NoError(t, err)
	require.Len(t, presented.Certificate, 1, "the client certificate is presented whatever CAs the server lists")
	require.Equal(t, "ns.tmprl.cloud", mtls.ServerName)

	_, err = ClientConfig{CertFile: cert}.tlsConfig()
	require.ErrorContains(t, err, "both the certificate and the key")
	_, err = ClientConfig{CAFile: key}.tlsConfig()
	require.ErrorContains(t, err, "no PEM certificate")
	_, err = ClientConfig{CAFile: filepath.Join(dir, "missing.pem")}.tlsConfig()
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestConfigDefaultsAndValidation(t *testing.T) {
	c := Config{}.withDefaults()
	require.Equal(t, DefaultTaskQueue, c.TaskQueue)
	require.Equal(t, DefaultWorkerStopTimeout, c.WorkerStopTimeout)
	require.Equal(t, DefaultConcurrency, c.DefaultConcurrency)
	require.Equal(t, DefaultReconcileInterval, c.ReconcileInterval)
	require.Equal(t, DefaultReconcileBatch, c.ReconcileBatch)
	require.Equal(t, DefaultReconcileAfter, c.ReconcileAfter)
	require.Equal(t, DefaultStickyTimeout, c.StickyScheduleToStartTimeout)
	require.Equal(t, DefaultWorkflowTaskTimeout, c.WorkflowTaskTimeout)
	require.Equal(t, DefaultCancelPollInterval, c.CancelPollInterval)
	require.NotNil(t, c.Logger)
	require.NoError(t, c.validate())
	require.Error(t, Config{WorkerStopTimeout: -time.Second}.withDefaults().validate())
	require.Error(t, Config{ReconcileBatch: -1}.withDefaults().validate())
	require.Error(t, Config{ReconcileAfter: -time.Second}.withDefaults().validate())
	require.ErrorContains(t, Config{StickyScheduleToStartTimeout: -time.Second}.withDefaults().validate(), "sticky")
	require.ErrorContains(t, Config{WorkflowTaskTimeout: -time.Second}.withDefaults().validate(), "workflow task timeout")
	require.ErrorContains(t, Config{CancelPollInterval: -time.Second}.withDefaults().validate(), "cancel poll interval")
	require.NoError(t, Config{ReconcileInterval: -1}.withDefaults().validate(), "a negative interval turns the reconciler off")
	_, err := New(nil, nil, nil, Config{})
	require.Error(t, err)
}

// TestNewRefusesAPoolThatSendsNoParameterTypes: see dbtx.CheckQueryExecMode.
// Neither the client nor the pool connects before the engine serves.
func TestNewRefusesAPoolThatSendsNoParameterTypes(t *testing.T) {
	c, err := client.NewLazyClient(client.Options{})
	require.NoError(t, err)
	defer c.Close()
	for _, mode := range []string{"exec", "simple_protocol"} {
		pool, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:1/none?default_query_exec_mode="+mode)
		require.NoError(t, err)
		defer pool.Close()
		_, err = New(c, pool, port.NewRegistry(), Config{})
		var fe *port.FieldError
		require.ErrorAs(t, err, &fe, mode)
		require.Equal(t, "pool", fe.Field)
	}
}

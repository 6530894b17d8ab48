package temporaladapter_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/testkit/temporalserver"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/test/contract/kinds"
)

// Dial's TLS options against a real mTLS frontend (temporal-server with
// Postgres persistence, see internal/testkit/temporalserver): the harness's
// client certificate runs a run through the adapter; every wrong setting is
// refused with an error that names the setting to fix.
func TestDialOverMTLS(t *testing.T) {
	t.Parallel()
	srv := temporalserver.Start(t, temporalserver.Options{SearchAttributes: temporaladapter.SearchAttributes()})
	dial := func(cfg temporaladapter.ClientConfig) error {
		cfg.HostPort, cfg.Namespace, cfg.Logger = srv.HostPort, srv.Namespace, testLogger()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := temporaladapter.Dial(ctx, cfg)
		if err == nil {
			c.Close()
		}
		return err
	}

	t.Run("client certificate signed by the server's CA", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := temporaladapter.Dial(ctx, temporaladapter.ClientConfig{
			HostPort: srv.HostPort, Namespace: srv.Namespace, Logger: testLogger(),
			CAFile: srv.CA.CertFile, CertFile: srv.ClientCert.CertFile, KeyFile: srv.ClientCert.KeyFile, ServerName: srv.ServerName,
		})
		require.NoError(t, err)
		t.Cleanup(c.Close) // after the engine's Stop, which the harness registers later
		h := newHarness(t)
		h.c = c
		eng := h.engine(temporaladapter.Config{})
		id := h.enqueue(eng, kinds.Three, kinds.TagIn{}, port.EnqueueOptions{IdempotencyKey: "mtls"})
		h.waitStatus(id, port.StatusSucceeded)
		require.Equal(t, map[string]int{"s1": 1, "s2": 1, "s3": 1}, h.effects(id))
	})

	rogue, err := temporalserver.NewCA(t.TempDir(), "rogue")
	require.NoError(t, err)
	rogueClient, err := rogue.IssueClient("rogue-client")
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		cfg  temporaladapter.ClientConfig
		want []string // all in the error
	}{{
		name: "client certificate signed by another CA",
		cfg:  temporaladapter.ClientConfig{CAFile: srv.CA.CertFile, CertFile: rogueClient.CertFile, KeyFile: rogueClient.KeyFile},
		want: []string{"the server refused the client certificate " + rogueClient.CertFile, "not signed by a CA the server trusts"},
	}, {
		name: "no client certificate",
		cfg:  temporaladapter.ClientConfig{CAFile: srv.CA.CertFile},
		want: []string{"the server requires a client certificate (mTLS)"},
	}, {
		name: "server certificate from a CA the client does not trust",
		cfg:  temporaladapter.ClientConfig{CAFile: rogue.CertFile, CertFile: srv.ClientCert.CertFile, KeyFile: srv.ClientCert.KeyFile},
		want: []string{"the server's certificate is not signed by the CA in " + rogue.CertFile, "x509: certificate signed by unknown authority"},
	}, {
		name: "plaintext",
		cfg:  temporaladapter.ClientConfig{},
		want: []string{"it probably requires TLS"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			err := dial(tc.cfg)
			require.Error(t, err)
			t.Logf("refused: %v", err)
			require.ErrorContains(t, err, "dial temporal "+srv.HostPort)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
		})
	}

	t.Run("stop handoff detected", func(t *testing.T) {
		ctx := context.Background()
		h, err := temporaladapter.DescribeStopHandoff(ctx, srv.Client, srv.Namespace, "any-queue")
		require.NoError(t, err)
		require.Equal(t, temporaladapter.StopHandoff{PollCompletesOnShutdown: true, Partitions: 1}, h,
			"temporal-server 1.32 with the harness's dynamic config")
		require.True(t, h.KeepsPolledTasks())

		h, err = temporaladapter.DescribeStopHandoff(ctx, temporalClient, server.Namespace, "any-queue")
		require.NoError(t, err)
		require.False(t, h.PollCompletesOnShutdown, "the CLI's 1.29 dev server predates the capability")
		require.Equal(t, 4, h.Partitions, "the server's default")
		require.False(t, h.KeepsPolledTasks())

		_, err = temporaladapter.DescribeStopHandoff(ctx, srv.Client, "no-such-namespace", "any-queue")
		require.ErrorContains(t, err, "describe namespace no-such-namespace")
	})
}

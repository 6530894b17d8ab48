package temporalserver_test

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/taskport/taskport/internal/testkit"
	"github.com/taskport/taskport/internal/testkit/pgtest"
	"github.com/taskport/taskport/internal/testkit/temporalserver"
)

var server *temporalserver.Server

func TestMain(m *testing.M) {
	os.Exit(temporalserver.Main(m, temporalserver.Options{SearchAttributes: map[string]string{"TestKey": "Keyword", "TestNumber": "Int"}},
		func(s *temporalserver.Server) { server = s }))
}

// The server accepts a workflow over mTLS and a worker completes it; the
// namespace has the search attributes and advertises the capability the
// dynamic config turns on.
func TestServerCompletesWorkflow(t *testing.T) {
	testkit.RequireServes(t, server.Client, server.Namespace, "TestKey", "TestNumber")
	ns, err := server.Client.WorkflowService().DescribeNamespace(context.Background(),
		&workflowservice.DescribeNamespaceRequest{Namespace: server.Namespace})
	require.NoError(t, err)
	require.True(t, ns.GetNamespaceInfo().GetCapabilities().GetWorkerPollCompleteOnShutdown())
}

// Stop leaves nothing behind: the frontend no longer answers, both
// databases are dropped, the certificates are removed.
func TestStopCleansUp(t *testing.T) {
	dbURL, err := pgtest.Server()
	require.NoError(t, err)
	s, err := temporalserver.Launch(context.Background(), temporalserver.Options{DatabaseURL: dbURL})
	require.NoError(t, err)
	require.NoError(t, s.Stop())

	_, err = net.DialTimeout("tcp", s.HostPort, time.Second)
	require.Error(t, err, "the frontend still accepts connections after Stop")
	var left int
	admin := pgtest.Connect(t, dbURL)
	require.NoError(t, admin.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_database WHERE datname IN ($1, $2)`, s.PersistenceDB, s.VisibilityDB).Scan(&left))
	require.Zero(t, left, "databases %s and %s left behind", s.PersistenceDB, s.VisibilityDB)
	_, err = os.Stat(s.CA.CertFile)
	require.ErrorIs(t, err, os.ErrNotExist)
}

package app_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/app/apptest"
	"github.com/taskport/taskport/internal/syncbuf"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/temporaladapter"
	"github.com/taskport/taskport/workflows"
)

// A webhook's URL often carries its secret in the path. On each engine, a
// notification whose receiver is down (nothing listens on port 1) fails
// until it opens a decision, and the secret is in none of what an operator
// or a log reader sees: the decision reason, the logs of the engine and the
// activities, the run's last error, and on Temporal the workflow history
// the Temporal UI shows. The cause (the refused connection) is still there.
func TestWebhookSecretNeverLeaks(t *testing.T) {
	const secret = "secret-token"
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			var logs syncbuf.Buffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			w := engineWorld(t, e.new, apptest.Options{WebhookURL: "http://127.0.0.1:1/" + secret, Logger: log})

			a := apptest.NewAsset("leak.mkv", 10_000)
			p := w.CreatePlan(t, a)
			id := p.ID.String()
			apptest.Acked(t)(w.Plans.Approve(ctx, id, "ann", ""))
			require.Eventually(t, func() bool { return w.Plan(t, id).Status == acquisition.Downloading }, time.Minute, 20*time.Millisecond)
			w.FinishDownload(t, p, a)
			apptest.Acked(t)(w.Plans.ReportDownloadComplete(ctx, id, ""))
			var d acquisition.Decision
			require.Eventually(t, func() bool {
				open, err := w.Plans.ListDecisions(ctx, acquisition.DecisionOpen, 0)
				require.NoError(t, err)
				for _, o := range open {
					if o.Kind == workflows.KindNotifyWebhook {
						d = o
						return true
					}
				}
				return false
			}, 2*time.Minute, 50*time.Millisecond, "the notification never gave up")

			require.Contains(t, d.Reason, "connection refused", "the cause is kept")
			require.NotContains(t, d.Reason, secret)
			run, err := w.Engine.Get(ctx, port.RunID(d.RunID))
			require.NoError(t, err)
			require.NotContains(t, run.LastError, secret)
			tl, err := w.Plans.Timeline(ctx, id)
			require.NoError(t, err)
			for _, entry := range tl.Entries {
				require.NotContains(t, entry.Detail, secret)
			}
			require.Contains(t, logs.String(), "connection refused", "the logs say what failed")
			require.NotContains(t, logs.String(), secret)

			if e.name == "temporal" {
				var history []byte
				iter := temporalServer.Client.GetWorkflowHistory(ctx, temporaladapter.WorkflowID(port.RunID(d.RunID)), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
				for iter.HasNext() {
					ev, err := iter.Next()
					require.NoError(t, err)
					b, err := protojson.Marshal(ev)
					require.NoError(t, err)
					history = append(history, b...)
				}
				require.Contains(t, string(history), "connection refused", "the history holds the failure")
				require.NotContains(t, string(history), secret, "the Temporal UI shows the history")
			}
		})
	}
}

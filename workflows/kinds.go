package workflows

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/taskport/taskport/port"
)

// Step and heartbeat timeouts, by what a kind's steps wait on. On Temporal
// the step of a worker that died (or froze) is retried elsewhere only when
// its heartbeat timeout or, without one, its whole step timeout runs out; so
// a step that can run longer than a few seconds heartbeats, and every other
// step has a timeout as short as its work allows. (The lease engine notices
// a lost worker by its lease, whatever the step.)
const (
	// ImportStepTimeout bounds one attempt of a step that copies or hashes a
	// whole file (import, verify, and the compensation that hashes the
	// library file before removing it): a big file on a slow disk takes a
	// while.
	ImportStepTimeout = time.Hour
	// ImportHeartbeatTimeout: import and verify heartbeat after each chunk
	// (up to 256 MiB with fileimport's largest chunk size, on a slow disk,
	// plus a Postgres read of the cancel flag), so a minute passes only
	// when the worker is lost or its disk stuck.
	ImportHeartbeatTimeout = time.Minute
	// NetworkStepTimeout bounds one attempt of a step that calls
	// qBittorrent or a webhook. Each request is bounded by its client
	// (qbittorrent.DefaultTimeout, 30 s; the webhook client's 10 s); a step
	// makes at most six, so this is reached only when they all time out. It
	// is never what notices a lost worker: the heartbeat is.
	NetworkStepTimeout = 5 * time.Minute
	// NetworkHeartbeatTimeout: a step waiting on the network has no
	// progress to report, so it heartbeats from a ticker (activities'
	// Config.HeartbeatEvery, a fifth of this by default) for as long as it
	// runs. 10 s rides out a loaded machine delaying a beat or its RPC.
	NetworkHeartbeatTimeout = 10 * time.Second
	// DBStepTimeout bounds a step that only reads and writes Postgres
	// (checking the approval, handing on, opening or carrying out a
	// decision): it takes milliseconds; 15 s leaves room for a wait on a
	// plan's row lock or a loaded database, and a lost worker holds such a
	// step 15 s instead of port.DefaultStepTimeout's minute.
	DBStepTimeout = 15 * time.Second
)

// Definitions returns the nine kinds at their current versions.
func Definitions() []port.Definition {
	return []port.Definition{
		{Kind: KindApprovalAwait, Version: 1, Retry: port.NetworkRetry(), StepTimeout: DBStepTimeout, Handler: port.Handle(approvalAwait)},
		{Kind: KindDownloadSubmit, Version: 1, Retry: port.NetworkRetry(), StepTimeout: NetworkStepTimeout,
			HeartbeatTimeout: NetworkHeartbeatTimeout, Handler: port.Handle(downloadSubmit)},
		{Kind: KindDownloadAwait, Version: 1, Retry: port.NetworkRetry(), StepTimeout: NetworkStepTimeout,
			HeartbeatTimeout: NetworkHeartbeatTimeout, Handler: port.Handle(downloadAwait)},
		{Kind: KindAssetImport, Version: 1, Retry: port.FileRetry(), StepTimeout: ImportStepTimeout,
			HeartbeatTimeout: ImportHeartbeatTimeout, Handler: port.Handle(assetImport)},
		{Kind: KindAssetVerify, Version: 1, Retry: port.FileRetry(), StepTimeout: ImportStepTimeout,
			HeartbeatTimeout: ImportHeartbeatTimeout, Handler: port.Handle(assetVerify)},
		{Kind: KindDownloadCleanup, Version: 1, Retry: port.NetworkRetry(), StepTimeout: NetworkStepTimeout,
			HeartbeatTimeout: NetworkHeartbeatTimeout, Handler: port.Handle(downloadCleanup)},
		{Kind: KindPlanCancel, Version: 1, Retry: port.NetworkRetry(), StepTimeout: ImportStepTimeout,
			HeartbeatTimeout: NetworkHeartbeatTimeout, Handler: port.Handle(planCancel)},
		{Kind: KindDecisionResolve, Version: 1, Retry: port.NetworkRetry(), StepTimeout: DBStepTimeout, Handler: port.Handle(decisionResolve)},
		{Kind: KindNotifyWebhook, Version: 1, Retry: port.NetworkRetry(), StepTimeout: NetworkStepTimeout,
			HeartbeatTimeout: NetworkHeartbeatTimeout, Handler: port.Handle(notifyWebhook)},
	}
}

// Version is the current version of kind, the one Definitions returns; 0
// for a kind this package does not define. An outbox row records it as the
// lowest version that understands the input it carries (a process with only
// older code leaves the row to a newer one).
func Version(kind port.Kind) int {
	for _, d := range Definitions() {
		if d.Kind == kind {
			return d.Version
		}
	}
	return 0
}

// failed opens a pending decision when a step failed for good (ADR 2.6) and
// returns the step's error, so the run ends failed. A cancel or any other
// error is returned as is.
func failed(f port.Flow, planID string, input any, err error) error {
	var se *port.StepError
	if !errors.As(err, &se) {
		return err
	}
	raw, merr := json.Marshal(input)
	if merr != nil {
		return errors.Join(err, merr)
	}
	req := DecisionRequest{PlanID: planID, Kind: f.Kind(), RunID: f.RunID(), Input: raw, Reason: se.Error()}
	// Opening a decision only writes Postgres, whatever the kind's own
	// steps wait on (and it does not heartbeat).
	if _, derr := OpenDecision.Run(f, "open-decision", req, port.WithTimeout(DBStepTimeout), port.WithHeartbeatTimeout(0)); derr != nil {
		return errors.Join(err, derr)
	}
	return err
}

// approvalAwait waits until the plan is decided (ADR 2.2): the business DB is
// the truth, the approval signal only shortens the wait. It is retired: no
// run of it is started any more (the plans API's approval hands the plan on
// to download.submit in its own transaction, acquisition.Decide), and it
// stays registered, unchanged, so that the runs a release before this one
// started end: such a run sees an approval at its next check (the current
// API sends no wake-up), at most ApprovalWait after it, and finds the plan
// handed on already.
func approvalAwait(f port.Flow, in WaitInput) error {
	ref := PlanRef{PlanID: in.PlanID}
	for i := in.Iteration; ; i++ {
		st, err := CheckApproval.Run(f, stepName("check-approval", i), ref)
		if err != nil {
			return failed(f, in.PlanID, in, err)
		}
		if st.Canceled || st.Decided && !st.Approved {
			return nil
		}
		if st.Decided {
			if _, err := HandOffApproved.Run(f, "hand-off", ref); err != nil {
				return failed(f, in.PlanID, in, err)
			}
			return nil
		}
		if f.RestartSuggested() {
			return port.ContinueAsNew(WaitInput{PlanID: in.PlanID, Iteration: i + 1})
		}
		if _, err := f.WaitSignal(stepName("wait-approval", i), ApprovalTopic(in.PlanID), ApprovalWait, nil); err != nil {
			return err
		}
	}
}

// downloadSubmit adds the torrent through the ledger and hands on to
// download.await.
func downloadSubmit(f port.Flow, in PlanRef) error {
	if _, err := SubmitDownload.Run(f, "submit", in); err != nil {
		return failed(f, in.PlanID, in, err)
	}
	return nil
}

// downloadAwait waits for completion: check-download reads the business DB
// and the downloader and, once complete, records it and hands on to
// asset.import in the same transaction.
func downloadAwait(f port.Flow, in WaitInput) error {
	ref := PlanRef{PlanID: in.PlanID}
	for i := in.Iteration; ; i++ {
		st, err := CheckDownload.Run(f, stepName("check-download", i), ref)
		if err != nil {
			return failed(f, in.PlanID, in, err)
		}
		if st.Done || st.Canceled {
			return nil
		}
		if f.RestartSuggested() {
			return port.ContinueAsNew(WaitInput{PlanID: in.PlanID, Iteration: i + 1})
		}
		if _, err := f.WaitSignal(stepName("wait-download", i), DownloadTopic(in.PlanID), DownloadWait, nil); err != nil {
			return err
		}
	}
}

// assetImport copies the download into the library; the step checks the
// business cancel flag between chunks and stops itself.
func assetImport(f port.Flow, in PlanRef) error {
	if _, err := ImportAsset.Run(f, "import", in); err != nil {
		return failed(f, in.PlanID, in, err)
	}
	return nil
}

func assetVerify(f port.Flow, in PlanRef) error {
	if _, err := VerifyAsset.Run(f, "verify", in); err != nil {
		return failed(f, in.PlanID, in, err)
	}
	return nil
}

func downloadCleanup(f port.Flow, in PlanRef) error {
	if _, err := CleanupDownload.Run(f, "cleanup", in); err != nil {
		return failed(f, in.PlanID, in, err)
	}
	return nil
}

// planCancel is the compensation of ADR 2.4: the cancel flag is already
// written; this removes the torrent and any temp or partial library file,
// then ends the plan as canceled or abandoned.
func planCancel(f port.Flow, in CancelInput) error {
	if _, err := Compensate.Run(f, "compensate", in); err != nil {
		return failed(f, in.PlanID, in, err)
	}
	return nil
}

// decisionResolve carries out a resolved decision. Its own failure opens no
// further decision: it stays a failed run in the dead-letter view.
func decisionResolve(f port.Flow, in DecisionRef) error {
	_, err := ResolveDecision.Run(f, "resolve", in)
	return err
}

func notifyWebhook(f port.Flow, in NotifyInput) error {
	if _, err := PostWebhook.Run(f, "post", in); err != nil {
		return failed(f, in.PlanID, in, err)
	}
	return nil
}

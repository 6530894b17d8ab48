package workflows

import "github.com/taskport/taskport/port"

// The activities the kinds call. Bodies live in activities/; app.Register
// binds them with port.Bind, which checks the types.
var (
	CheckApproval   = port.DeclareActivity[PlanRef, ApprovalState]("plan.check_approval")
	HandOffApproved = port.DeclareActivity[PlanRef, Outcome]("plan.hand_off_approved")
	SubmitDownload  = port.DeclareActivity[PlanRef, Outcome]("download.submit")
	CheckDownload   = port.DeclareActivity[PlanRef, DownloadState]("download.check")
	ImportAsset     = port.DeclareActivity[PlanRef, ImportOutcome]("asset.import")
	VerifyAsset     = port.DeclareActivity[PlanRef, Outcome]("asset.verify")
	CleanupDownload = port.DeclareActivity[PlanRef, Outcome]("download.cleanup")
	Compensate      = port.DeclareActivity[CancelInput, Outcome]("plan.compensate")
	ResolveDecision = port.DeclareActivity[DecisionRef, Outcome]("decision.resolve")
	OpenDecision    = port.DeclareActivity[DecisionRequest, DecisionOpened]("decision.open")
	PostWebhook     = port.DeclareActivity[NotifyInput, Outcome]("notify.post")
)

package enginekit

// CheckJSONB lets the external benchmark price the jsonb check alone.
var CheckJSONB = checkJSONB
